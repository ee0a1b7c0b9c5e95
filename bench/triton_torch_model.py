"""The PyTorch side of bench/triton_gpu.py's server comparison: a model.py for Triton's Python
backend (the backend PyTriton drives) that serves torchvision's ResNet-50 with the weights
bench/_common.py's export_resnet50 gives kiln (seed 0), so both sides of the comparison run the
same network with the same weights in the same tritonserver, with the same batching.

PyTorch at its best for this workload: fp16, channels-last (cuDNN's tensor-core kernels), one
CUDA graph per batch size 1..max_batch_size captured at load (no per-layer launches per request),
inputs copied once into the graph's static input (fp32 on the host, cast on the GPU, as kiln's
engine takes fp32), outputs copied back once. The Python backend runs each instance in its own
stub process, which talks to the server through shared memory: what serving PyTorch through
PyTriton costs, minus PyTriton's extra hop from the stub to the user's process.

bench/triton_gpu.py copies this file as MODEL/1/model.py; its config.pbtxt sets backend "python",
max_batch_size, the dynamic batcher and the instances, plus parameters "input" and "output" (the
tensor names, as in kiln's model).
"""
import json

import torch
import torch.utils.dlpack
import torchvision
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.input = params.get("input", "input")
        self.output = params.get("output", "logits")
        self.max_batch = int(config["max_batch_size"])
        device_id = int(args.get("model_instance_device_id", 0) or 0)
        self.device = torch.device("cuda", device_id)
        torch.cuda.set_device(self.device)
        # One intra-op CPU thread per instance: the GPU does the work, and each instance's stub
        # process otherwise starts a thread per core that compete with the server's (and the other
        # instances') threads for every small host-side operation.
        torch.set_num_threads(int(params.get("torch_threads", "1")))
        # cuDNN's autotuning per shape (the fastest kernels; what the throughput comparisons use);
        # parameter cudnn_benchmark "false" skips it (a faster start, bench/triton_startup.py).
        torch.backends.cudnn.benchmark = params.get("cudnn_benchmark", "true") != "false"
        torch.manual_seed(0)  # the weights bench/_common.py's export_resnet50 exports
        model = torchvision.models.resnet50(weights=None).eval()
        model = model.to(self.device).half().to(memory_format=torch.channels_last)
        self.graphs = {}
        with torch.inference_mode():
            for b in range(1, self.max_batch + 1):
                static_in = torch.zeros(b, 3, 224, 224, device=self.device, dtype=torch.float32)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # cuDNN's choices made before the capture
                    for _ in range(3):
                        model(static_in.half().contiguous(memory_format=torch.channels_last))
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = model(static_in.half().contiguous(memory_format=torch.channels_last)).float()
                self.graphs[b] = (graph, static_in, static_out)
        torch.cuda.synchronize()
        self.pinned_in = torch.empty(self.max_batch, 3, 224, 224, dtype=torch.float32).pin_memory()
        self.pinned_out = torch.empty(self.max_batch, 1000, dtype=torch.float32).pin_memory()

    def execute(self, requests):
        # DLPack, not numpy, in both directions: the stub's numpy interop depends on the numpy
        # it was built against (with numpy 2 its output tensors came out empty).
        xs = [torch.from_dlpack(pb_utils.get_input_tensor_by_name(r, self.input).to_dlpack()) for r in requests]
        b = sum(x.shape[0] for x in xs)
        graph, static_in, static_out = self.graphs[b]
        host = self.pinned_in[:b]
        off = 0
        for x in xs:
            host[off:off + x.shape[0]].copy_(x)
            off += x.shape[0]
        with torch.inference_mode():
            static_in.copy_(host, non_blocking=True)
            graph.replay()
            out = self.pinned_out[:b]
            out.copy_(static_out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
        responses = []
        off = 0
        for x in xs:
            n = x.shape[0]
            part = out[off:off + n].clone()  # the pinned buffer is reused by the next execution
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor.from_dlpack(self.output, torch.utils.dlpack.to_dlpack(part))]))
            off += n
        return responses
