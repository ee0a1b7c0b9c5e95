// How a request input that another thread has just written into ordinary (pageable) host memory
// best reaches the GPU: the question behind the Triton backend's input path (serving/triton:
// Triton's HTTP thread writes the request body, the instance thread hands it to the GPU).
//
// For each size, a writer thread fills a fresh pageable buffer (as the HTTP thread fills a
// request body), then the measuring thread moves it to device memory by one of:
//   staged    memcpy into pinned staging in 64 KiB pieces, a cudaMemcpyAsync per 128 KiB
//             copied (the backend's path with input_copy_threads 0), then a stream sync
//   staged1   memcpy into pinned staging, one cudaMemcpyAsync, sync
//   pageable  cudaMemcpyAsync straight from the pageable buffer (the driver stages it), sync
//   register  cudaHostRegister the buffer, cudaMemcpyAsync, sync, cudaHostUnregister
//   pool K    the backend's ParallelCopier (serving/triton/parallel_copy.h) with K helper threads,
//             each finished range of at least 128 KiB queued to the device at once (the backend's
//             path with input_copy_threads K), sync
//   pool1 K   the same copier, then one cudaMemcpyAsync of the whole input, sync
// and the source read alone (memcpy into pinned staging, no device copy) for reference. The
// helpers are woken just before each transfer, as the backend wakes them when it sees a large
// input among the requests.
// Prints the median microseconds per transfer of each path and its ratio to `staged`.
//
// Build (from the repository root):
//   nvcc -O2 -std=c++17 -I. -o h2d_input_paths bench/h2d_input_paths.cu serving/triton/parallel_copy.cpp
// Usage: ./h2d_input_paths [repeats=400] [helpers=3] [bytes...]
//   (default sizes: 64 KiB, 602,112 B, 4 MiB)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "serving/triton/parallel_copy.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "h2d_input_paths: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A fresh pageable buffer written by another thread, as a server's network thread writes a body.
std::vector<unsigned char> written_elsewhere(size_t bytes, int seed) {
  std::vector<unsigned char> body;
  std::thread([&] {
    body.resize(bytes);
    for (size_t i = 0; i < bytes; ++i) body[i] = static_cast<unsigned char>(i * 131 + seed);
  }).join();
  return body;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(10, std::atoi(argv[1])) : 400;
  const int helpers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  std::vector<size_t> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {64 * 1024, 602112, 4 * 1024 * 1024};
  const size_t most = *std::max_element(sizes.begin(), sizes.end());
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* device = nullptr;
  unsigned char* pinned = nullptr;
  check(cudaMalloc(&device, most), "cudaMalloc");
  check(cudaMallocHost(reinterpret_cast<void**>(&pinned), most), "cudaMallocHost");
  kiln::triton::ParallelCopier::Options options;
  options.min_callback_bytes = 128 * 1024;  // as the backend sets it for CUDA instances
  kiln::triton::ParallelCopier pool(helpers, options);
  constexpr int kPaths = 7;
  const std::string pool_name = "pool " + std::to_string(helpers), pool1_name = "pool1 " + std::to_string(helpers);
  const char* names[kPaths] = {"read only", "staged",          "staged1",         "pageable",
                               "register",  pool_name.c_str(), pool1_name.c_str()};
  std::printf("| bytes |");
  for (const char* n : names) std::printf(" %s |", n);
  std::printf(" checked |\n| --- |");
  for (int path = 0; path <= kPaths; ++path) std::printf(" --- |");
  std::printf("\n");
  std::vector<unsigned char> back(most);
  for (size_t bytes : sizes) {
    std::vector<std::vector<double>> times(kPaths);
    bool same = true;
    for (int r = 0; r < repeats; ++r) {
      for (int path = 0; path < kPaths; ++path) {
        std::vector<unsigned char> body = written_elsewhere(bytes, r + path);
        if (path >= 5) pool.wake();
        const double t0 = now_us();
        switch (path) {
          case 0:
            std::memcpy(pinned, body.data(), bytes);
            break;
          case 1: {
            size_t queued = 0;
            for (size_t off = 0; off < bytes; off += 64 * 1024) {
              const size_t n = std::min<size_t>(64 * 1024, bytes - off);
              std::memcpy(pinned + off, body.data() + off, n);
              if (off + n - queued >= 128 * 1024 || off + n == bytes) {
                check(cudaMemcpyAsync(static_cast<unsigned char*>(device) + queued, pinned + queued, off + n - queued,
                                      cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync");
                queued = off + n;
              }
            }
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            break;
          }
          case 2:
            std::memcpy(pinned, body.data(), bytes);
            check(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            break;
          case 3:
            check(cudaMemcpyAsync(device, body.data(), bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            break;
          case 4:
            check(cudaHostRegister(body.data(), bytes, cudaHostRegisterDefault), "cudaHostRegister");
            check(cudaMemcpyAsync(device, body.data(), bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            check(cudaHostUnregister(body.data()), "cudaHostUnregister");
            break;
          case 5: {
            const kiln::triton::CopySegment segment{pinned, body.data(), bytes};
            pool.copy(&segment, 1, [&](uint8_t* from, size_t n) {
              check(cudaMemcpyAsync(static_cast<unsigned char*>(device) + (from - pinned), from, n,
                                    cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync");
            });
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            break;
          }
          case 6: {
            const kiln::triton::CopySegment segment{pinned, body.data(), bytes};
            pool.copy(&segment, 1);
            check(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            break;
          }
        }
        times[path].push_back(now_us() - t0);
        if (path > 0 && r == 0) {  // the device holds the body: every path moves the right bytes
          check(cudaMemcpy(back.data(), device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
          same = same && std::memcmp(back.data(), body.data(), bytes) == 0;
        }
      }
    }
    const double staged = median(times[1]);
    std::printf("| %zu |", bytes);
    for (int path = 0; path < kPaths; ++path) {
      const double m = median(times[path]);
      std::printf(" %.1f us (%.2fx) |", m, m / staged);
    }
    std::printf(" %s |\n", same ? "equal" : "DIFFERENT");
    if (!same) return 1;
  }
  std::printf(
      "\nmedian of %d transfers per path and size; (ratio) = path / staged; read only = memcpy into pinned "
      "memory without the device copy\n",
      repeats);
  return 0;
}
