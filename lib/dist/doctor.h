// `cnn-train doctor`: on every rank, the versions of the CUDA runtime and driver, cuDNN, NCCL and
// MPI, the GPU it would train on, and an all-reduce bandwidth probe; rank 0 gets the table and the
// mismatches between ranks (by name: "NCCL: 2.21.5 on ranks 0-3, 2.19.3 on rank 4 (node7)").
// Trap: collective: every rank must call run_doctor with the same options.
#pragma once

#include <string>
#include <vector>

#include "dist/communicator.h"

namespace cnn {

struct DoctorOptions {
  std::string device = "auto";  // auto | cpu | cuda: where the probe's buffer lives
  double size_mb = 64;          // MiB all-reduced per iteration
  int iterations = 5;           // timed, after one warm-up
};

struct DoctorReport {
  std::string text;                     // the table, the probe and the mismatches (rank 0's view)
  std::vector<std::string> mismatches;  // one line each; empty when every rank agrees
};

DoctorReport run_doctor(Communicator& comm, const DoctorOptions& options);

}  // namespace cnn
