// Pointwise activation formulas, written once for the CPU ops and the CUDA kernels (CNN_HD).
// Trap: relu, leaky_relu and elu backward read x (at exactly 0 they take the negative side, so
// relu'(0) = 0); sigmoid and tanh backward read y. An in-place forward must keep what backward reads.
#pragma once

#include <math.h>

#include "core/host_device.h"
#include "ops/activation.h"

namespace cnn {

// Overloads instead of std:: so the same spelling compiles on the host and in CUDA device code,
// and float stays float (the unqualified C names would promote to double on the host).
CNN_HD float act_exp(float x) { return expf(x); }
CNN_HD double act_exp(double x) { return exp(x); }
CNN_HD float act_expm1(float x) { return expm1f(x); }
CNN_HD double act_expm1(double x) { return expm1(x); }
CNN_HD float act_tanh(float x) { return tanhf(x); }
CNN_HD double act_tanh(double x) { return tanh(x); }

template <typename T>
CNN_HD T relu_forward(T x) {
  return x > T(0) ? x : T(0);
}
template <typename T>
CNN_HD T relu_backward(T x, T dy) {
  return x > T(0) ? dy : T(0);
}

template <typename T>
CNN_HD T leaky_relu_forward(T x, T alpha) {
  return x > T(0) ? x : alpha * x;
}
template <typename T>
CNN_HD T leaky_relu_backward(T x, T alpha, T dy) {
  return x > T(0) ? dy : alpha * dy;
}

// alpha * (e^x - 1) through expm1, which keeps precision for x near 0.
template <typename T>
CNN_HD T elu_forward(T x, T alpha) {
  return x > T(0) ? x : alpha * act_expm1(x);
}
// d/dx alpha (e^x - 1) = alpha e^x = y + alpha, so no second exp is needed.
template <typename T>
CNN_HD T elu_backward(T x, T y, T alpha, T dy) {
  return x > T(0) ? dy : dy * (y + alpha);
}

// For very negative x, e^-x overflows to inf and the result is 0, as it should be.
template <typename T>
CNN_HD T sigmoid_forward(T x) {
  return T(1) / (T(1) + act_exp(-x));
}
template <typename T>
CNN_HD T sigmoid_backward(T y, T dy) {
  return dy * y * (T(1) - y);
}

template <typename T>
CNN_HD T tanh_forward(T x) {
  return act_tanh(x);
}
template <typename T>
CNN_HD T tanh_backward(T y, T dy) {
  return dy * (T(1) - y * y);
}

// One element of any kind (the switch costs a branch per element: fine for the reference and
// generic kernels, hoisted out of the loop by the fast paths).
template <typename T>
CNN_HD T activation_forward_value(ActivationKind kind, T alpha, T x) {
  switch (kind) {
    case ActivationKind::relu: return relu_forward(x);
    case ActivationKind::leaky_relu: return leaky_relu_forward(x, alpha);
    case ActivationKind::elu: return elu_forward(x, alpha);
    case ActivationKind::sigmoid: return sigmoid_forward(x);
    case ActivationKind::tanh: return tanh_forward(x);
  }
  return x;
}

// Backward from the output alone, for a producer that fused the activation and kept only y
// (activation_fusable says which kinds qualify): relu, leaky_relu and elu with alpha > 0 have
// y > 0 exactly where x > 0, and elu's slope alpha e^x is y + alpha.
template <typename T>
CNN_HD T activation_backward_from_output(ActivationKind kind, T alpha, T y, T dy) {
  switch (kind) {
    case ActivationKind::relu: return y > T(0) ? dy : T(0);
    case ActivationKind::leaky_relu: return y > T(0) ? dy : alpha * dy;
    case ActivationKind::elu: return y > T(0) ? dy : dy * (y + alpha);
    case ActivationKind::sigmoid: return sigmoid_backward(y, dy);
    case ActivationKind::tanh: return tanh_backward(y, dy);
  }
  return dy;
}

template <typename T>
CNN_HD T activation_backward_value(ActivationKind kind, T alpha, T x, T y, T dy) {
  switch (kind) {
    case ActivationKind::relu: return relu_backward(x, dy);
    case ActivationKind::leaky_relu: return leaky_relu_backward(x, alpha, dy);
    case ActivationKind::elu: return elu_backward(x, y, alpha, dy);
    case ActivationKind::sigmoid: return sigmoid_backward(y, dy);
    case ActivationKind::tanh: return tanh_backward(y, dy);
  }
  return dy;
}

}  // namespace cnn
