// REWIND_CLONES: GCC builds the function it marks for AVX-512, AVX2+FMA and baseline x86-64 and
// picks one at load time (ifunc), so plain loops vectorise for the machine they run on. Every
// clone must perform the same IEEE operations (explicit fma, no contraction, no reassociation),
// so that the choice never changes a bit. Off under ASan (ifunc resolvers run before it starts)
// and on other compilers and architectures, where the function is built once.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define REWIND_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define REWIND_CLONES
#endif
