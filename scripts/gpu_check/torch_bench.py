"""scripts/gpu_check/torch_bench.py: PyTorch eager ResNet-50 training images/sec on the
same GPU, for the GPU check: channels-last, SGD momentum 0.9, cross-entropy, synthetic
data on the device, cudnn.benchmark on; precisions fp32 (TF32 off), tf32, fp16 (AMP:
float16 autocast + GradScaler; "amp" is the same) and bf16 (AMP: bfloat16 autocast, no
scaler), TF32 allowed for what autocast leaves in float32. Prints
"RESULT torch resnet50 <precision> <batch> <images/sec>" (and the final loss).
ResNet-50 is torchvision's when importable, else the same architecture defined here.
Usage: torch_bench.py [BATCH [STEPS [PRECISIONS [WARMUP]]]], PRECISIONS comma-separated
(default fp32,tf32,fp16,bf16), WARMUP untimed steps (default 5). GC_STEP_LIMIT_S (set by
scripts/gpu_check.sh: the seconds this process may run): a precision after the first
starts only if the longest one so far still fits in what is left, so the run ends with
the figures it has instead of being cut off inside one.

Timing, the same as bench/cnn_bench --device gpu's "total images/sec": WARMUP untimed
steps, torch.cuda.synchronize(), clock start, STEPS timed steps that never wait for the
GPU (the loss is read only after the clock stops), torch.cuda.synchronize(), clock stop;
images/sec = BATCH x STEPS / that time. (cnn_bench also waits for the GPU at each of its
display steps, a few per run, and passes a barrier, immediate at one rank, before each
clock reading. In fp16, PyTorch's GradScaler.step reads its inf/NaN flag with .item(), a
wait per step that is part of AMP as PyTorch users run it; cnn_bench skips on the device.)"""
import os
import sys
import time

T_START = time.perf_counter()

import torch
import torch.nn as nn


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride, down):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout)) if down else None)

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + idt)


def resnet50(num_classes=1000):
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=num_classes)
    except Exception:
        pass
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1, b == 0))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


def grad_scaler(enabled):
    try:  # torch >= 2.3 spells it torch.amp.GradScaler("cuda")
        return torch.amp.GradScaler("cuda", enabled=enabled)
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler(enabled=enabled)


def bench(precision, batch, steps, warm=5):
    if precision == "amp":
        precision = "fp16"
    if precision not in ("fp32", "tf32", "fp16", "bf16"):
        sys.exit(f"torch_bench: unknown precision {precision!r}: expected fp32, tf32, fp16, bf16")
    tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    amp = precision in ("fp16", "bf16")
    amp_dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    scaler = grad_scaler(precision == "fp16")  # bf16 has float32's range: no scaling

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype, enabled=amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(warm):
        step()
    torch.cuda.synchronize()  # the clock starts with the GPU idle
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()  # no .item(): nothing waits for the GPU inside the timed steps
    torch.cuda.synchronize()  # the one wait: every queued kernel is inside the time
    ips = batch * steps / (time.perf_counter() - t0)
    print(f"torch {precision}: final loss {loss.item():.4f}", flush=True)
    print(f"RESULT torch resnet50 {precision} {batch} {ips:.1f}", flush=True)
    del model, opt, x, y
    torch.cuda.empty_cache()


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    precisions = sys.argv[3].split(",") if len(sys.argv) > 3 else ["fp32", "tf32", "fp16", "bf16"]
    warm = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        sys.exit(77)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    limit = float(os.environ.get("GC_STEP_LIMIT_S", "0") or 0)
    longest = 0.0
    for i, p in enumerate(precisions):
        used = time.perf_counter() - T_START
        if limit > 0 and i > 0 and used + longest > limit - 2:
            print(f"torch {p}: skipped: {used:.0f} s of the {limit:.0f} s limit used, and "
                  f"the longest precision so far took {longest:.0f} s", flush=True)
            continue
        t0 = time.perf_counter()
        bench(p, batch, steps, warm)
        longest = max(longest, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
