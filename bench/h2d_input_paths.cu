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
// and the source read alone (memcpy into pinned staging, no device copy) for reference.
// Prints the median microseconds per transfer of each path and its ratio to `staged`.
//
// Build: nvcc -O2 -std=c++17 -o h2d_input_paths bench/h2d_input_paths.cu
// Usage: ./h2d_input_paths [repeats=400] [bytes...]   (default sizes: 64 KiB, 602,112 B, 4 MiB)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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
  std::vector<size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {64 * 1024, 602112, 4 * 1024 * 1024};
  const size_t most = *std::max_element(sizes.begin(), sizes.end());
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* device = nullptr;
  unsigned char* pinned = nullptr;
  check(cudaMalloc(&device, most), "cudaMalloc");
  check(cudaMallocHost(reinterpret_cast<void**>(&pinned), most), "cudaMallocHost");
  const char* names[] = {"read only", "staged", "staged1", "pageable", "register"};
  std::printf("| bytes | %s | %s | %s | %s | %s | checked |\n| --- | --- | --- | --- | --- | --- | --- |\n", names[0],
              names[1], names[2], names[3], names[4]);
  std::vector<unsigned char> back(most);
  for (size_t bytes : sizes) {
    std::vector<std::vector<double>> times(5);
    bool same = true;
    for (int r = 0; r < repeats; ++r) {
      for (int path = 0; path < 5; ++path) {
        std::vector<unsigned char> body = written_elsewhere(bytes, r + path);
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
    for (int path = 0; path < 5; ++path) {
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
