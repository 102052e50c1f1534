// Our own 2-D real FFTs for the FFT convolution (conv2d_fft_cuda.cu), for square power-of-two
// transforms of side L in {8, 16, 32, 64}. Unlike cuFFT's batched transforms, which read and
// write contiguous planes, these read the real planes where they lie (placing each at an offset
// of a zero L x L plane: no padded copy) and write the spectra frequency-major, (F, planes), the
// layout the per-frequency GEMMs want (no transpose); the inverse reads frequency-major spectra
// and writes only the cropped, scaled output (+ bias). Per L x L plane: 4 passes of memory fewer
// than pad, R2C, transpose, and transpose, C2R, crop.
// A spectrum holds F = L * (L / 2 + 1) complex numbers, frequency f = kh * (L / 2 + 1) + kw, as
// cuFFT's R2C lays them out; forward is e^(-2 pi i ...), inverse e^(+...) and unscaled, as cuFFT's.
#pragma once

#include <cstdint>

namespace cnn {

// True for the sides the transforms below take: 8, 16, 32 and 64.
bool conv2d_fft_own_size(int L);

// Spectra of `planes` real Hs x Ws planes (contiguous, plane p at src + p * Hs * Ws), each placed
// at row oh, column ow of a zero L x L plane (0 <= oh, oh + Hs <= L, likewise w):
// out[f * ld + p] (complex; out holds interleaved floats), ld >= planes.
void conv2d_fft_forward_transform(void* stream, const float* src, int64_t planes, int Hs, int Ws, int oh, int ow,
                                  int L, float* out, int64_t ld);

// The inverse: the real L x L planes of the spectra in[f * ld + p], of which dst takes the
// Ho x Wo window at (oh, ow), times scale, plus bias[p % K] when bias is not null; plane p at
// dst + p * Ho * Wo.
void conv2d_fft_inverse_transform(void* stream, const float* in, int64_t ld, int64_t planes, int L, int Ho, int Wo,
                                  int oh, int ow, float scale, const float* bias, int K, float* dst);

}  // namespace cnn
