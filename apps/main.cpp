// rewind: command-line entry point (subcommands dispatch to apps/cmd_*.cpp).
#include <cstdio>
#include <cstring>
int main(int argc, char** argv) {
  std::fprintf(stderr, "rewind: usage: rewind <make-model|run|logits|bench> [options]\n");
  return argc > 1 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
