// CNN_SIMD_CLONES: compile a hot CPU loop three times (AVX-512, AVX2 + FMA, the baseline) and let
// the loader pick by the CPU's features. Trap: clones named by a CPU model ("arch=skylake-avx512",
// "arch=haswell") are picked only on CPUs GCC recognises by model; GCC 12 names neither Sapphire
// nor Emerald Rapids, so there the baseline SSE2 clone ran. The x86-64 levels go by features.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define CNN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CNN_SIMD_CLONES
#endif
