// Subcommands of the `rewind` binary and the helpers they share.
#pragma once

#include <memory>
#include <string>

#include "rewind/base/thread_pool.h"
#include "rewind/model/model.h"

namespace rw::app {

int cmd_make_model(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_cache_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_spec_bench(int argc, char** argv);

// Prints "rewind: <msg>" to stderr and returns exit code 1.
int fail(const std::string& msg);

// Default thread count: the machine's cores.
int default_threads();

// Loads a model, showing a progress line on stderr while packing large files (> 64 MiB).
// store: "auto", "f32", "bf16".
// mtp: also load the checkpoint's MTP head (for --spec mtp).
Result<std::unique_ptr<Model>> load_model(const std::string& dir, const std::string& store,
                                          ThreadPool* pool, double* seconds, bool mtp = false);

double now_seconds();

}  // namespace rw::app
