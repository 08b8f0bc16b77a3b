#!/usr/bin/python3
"""tests/onnx_reference.py DIR [MODEL...]: the ONNX files and PyTorch references of
tests/test_onnx_models.c.

For each model, DIR/<model>.onnx is the model exported by torch.onnx.export (opset 13, in
training mode, so batch norm stays a layer with its running statistics and the
initializers keep the state_dict's names), and DIR/<model>.ref.safetensors holds:
  x, y            a batch of inputs and labels (I64)
  logits          PyTorch's eval-mode forward of x, from the exported weights
  steps           how many training steps the reference took (I64)
  after.<name>    every parameter and running statistic after those steps of
                  torch.optim.SGD(lr=lr, momentum=0.9) on (x, y) with cross-entropy
  lr              its learning rate (F32)
  after64.<name>  (mobilenet_v2) the same steps from the same start in float64, rounded
                  to F32: PyTorch's own float32 error
  margin          how close its training steps came to a kink (F32): the smallest
                  |input| of a ReLU (or distance of a ReLU6 input from 0 and 6), and the
                  smallest gap between the two largest values of a max-pool window
Steps: 5 of SGD for the custom CNN and vgg11 (batch 4, lr 0.01), resnet18 (3x64x64,
batch 2, lr 0.001) and mobilenet_v2 (3x64x64, batch 4, lr 0.001; its last maps are 2x2,
so each batch norm there normalizes 16 values).
Why the batch seeds, the small learning rate and mobilenet_v2's batch norm weights: nn
and PyTorch round differently (about 1e-6 of a pre-activation after a batch norm), so a
ReLU input that PyTorch computes within about 1e-6 of 0 may fall on the other side in
nn; that switches the whole gradient of one element (resnet18 at batch 2, 64x64, seed
99: one input at 7.5e-7 in PyTorch, negative in nn, put layer1.0.bn1.bias's gradient
2.7e-2 apart after one step). resnet18's batch (seed 36) keeps every kink at least 2e-6
away during PyTorch's 5 steps (of 40 seeds the largest margin; most stay within 1e-6),
and lr 0.001 keeps the steps small enough that the two sides do not drift apart (at lr
0.01 PyTorch's own float32 and float64 runs differ by 5e-3 after 5 steps, at 0.001 by
9e-6). mobilenet_v2 with torchvision's initialization has no such batch (at 64x64 no
seed of 30 kept its ReLU6 inputs more than 8e-7 from a kink: a batch norm with weight 1
and bias 0 puts millions of inputs around 0), so its batch norms before a ReLU6 start
from weights that keep every channel's inputs several spreads from 0 and 6
(away_from_kinks); the channels are then off, linear or saturated, every op still
carries gradient, and PyTorch's float32 steps agree with its float64 steps (after64.*,
saved for mobilenet_v2) to 4e-6 of each tensor's largest value.
mobilenet_v2's blocks end in a batch norm without activation (conv.2 or conv.3) whose
output reaches the loss only through 1x1 convolutions and residual adds into another
batch norm, which subtracts any per-channel shift: the gradient of those biases is zero
(rounding noise on both sides), so they start from nonzero values and compare as
unchanged. So does the bias of the batch norm after each depthwise convolution: its
ReLU6 passes a shift unchanged (linear) or not at all, into the 1x1 projection.
The models: torchvision's resnet18 and mobilenet_v2 with 10 classes
(mobilenet_v2's dropout at p=0 so that both sides draw no masks), torchvision's vgg11
convolutions with a classifier
sized for 32x32 inputs (its 7x7 adaptive pool cannot be exported from a 1x1 map), and a
small custom CNN on 1x28x28 inputs that uses every op nn imports beyond those.
Also DIR/unsupported_op.onnx (a Resize node) and DIR/rank2_input.onnx (an [N, 784]
input), for the error checks.
"""
import copy
import os
import sys

import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from hvd_models import save_file  # noqa: E402



class Custom(nn.Module):
    """Conv + batch norm + relu, max pool, a dilated depthwise conv with LeakyRelu, a
    pointwise conv, a sigmoid channel gate (Mul), a 3x1 conv with Tanh, a channel concat,
    average pool, flatten, a linear layer with ReLU6 (Clip), dropout p=0 and a MatMul + Add
    head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.gate = nn.Conv2d(16, 16, 1)
        self.tall = nn.Conv2d(16, 8, (3, 1), padding=(1, 0))
        self.fc1 = nn.Linear(24 * 7 * 7, 32)
        self.drop = nn.Dropout(0.0)
        self.head_w = nn.Parameter(torch.randn(32, 10) * 0.2)
        self.head_b = nn.Parameter(torch.randn(10) * 0.1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        y = self.pw(F.leaky_relu(self.dw(x), 0.1))
        y = y * torch.sigmoid(self.gate(F.adaptive_avg_pool2d(y, 1)))
        z = torch.tanh(self.tall(y))
        x = F.avg_pool2d(torch.cat([y, z], 1), 2)
        x = self.drop(F.relu6(self.fc1(torch.flatten(x, 1))))
        return x @ self.head_w + self.head_b


def vgg11_32():
    m = torchvision.models.vgg11(num_classes=10)
    m.avgpool = nn.AdaptiveAvgPool2d(1)
    m.classifier = nn.Sequential(nn.Linear(512, 256), nn.ReLU(True), nn.Dropout(0.0),
                                 nn.Linear(256, 256), nn.ReLU(True), nn.Dropout(0.0),
                                 nn.Linear(256, 10))
    return m


def mobilenet_v2():
    m = torchvision.models.mobilenet_v2(num_classes=10)
    m.classifier[0].p = 0.0
    away_from_kinks(m)
    return m


def away_from_kinks(m):
    """Batch norm weights and biases (seeded) that keep every ReLU6 input far from 0 and 6.
    In training mode a batch norm's output channel has exactly its bias as mean and about
    its weight as spread over the batch; before a ReLU6 each channel gets a weight of
    0.4-0.6 and a bias of -3 (off: no gradient), 3 (linear; half the channels) or 9
    (saturated: no gradient), so a kink is at least 5 spreads away (PyTorch's margin,
    saved with the reference, is 2.35e-4 at the batch of MODELS; the two sides round
    about 1e-6 apart). The other batch norms (the blocks' linear outputs) get biases of
    spread 0.5, so that their values are not rounding noise: no gradient reaches them
    (see the module's docstring)."""
    g = torch.Generator().manual_seed(7)
    gated = set()
    for mod in m.modules():
        if isinstance(mod, nn.Sequential) and len(mod) == 3 and isinstance(mod[2], nn.ReLU6):
            bn, c = mod[1], mod[1].num_features
            with torch.no_grad():
                bn.weight.copy_(0.5 * (0.8 + 0.4 * torch.rand(c, generator=g)))
                shifts = torch.tensor([-3.0, 3.0, 3.0, 9.0])
                bn.bias.copy_(shifts[torch.randint(0, 4, (c,), generator=g)])
            gated.add(bn)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d) and mod not in gated:
            with torch.no_grad():
                mod.bias.normal_(0.0, 0.5, generator=g)


# name: (constructor, input shape, batch, learning rate, SGD steps, seed of the batch)
MODELS = {
    "custom": (Custom, (1, 28, 28), 4, 0.01, 5, 99),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (3, 64, 64), 2, 0.001, 5,
                 36),
    "mobilenet_v2": (mobilenet_v2, (3, 64, 64), 4, 0.001, 5, 99),
    "vgg11": (vgg11_32, (3, 32, 32), 4, 0.01, 5, 99),
}
# Models whose steps are also taken in float64 (after64.*), to measure PyTorch's own
# float32 error.
FLOAT64_TOO = {"mobilenet_v2"}


def export(model, shape, path):
    x = torch.randn(2, *shape)
    torch.onnx.export(model, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"], output_names=["logits"])
    # Tracing in training mode ran a forward that moved the running statistics: start the
    # reference from exactly the file's values.
    inits = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
             for t in onnx.load(path).graph.initializer}
    state = model.state_dict()
    for name in state:
        if name in inits:
            state[name] = inits[name].reshape(state[name].shape)
    model.load_state_dict(state)


def kink_margin(model):
    """Hooks that keep in the returned list's one value the smallest distance of a ReLU
    (ReLU6) input from its kink(s), and of a max-pool window's two largest values."""
    margin = [float("inf")]

    def relu(mod, inp, out):
        x = inp[0].detach()
        d = x.abs().min()
        if isinstance(mod, nn.Hardtanh):  # ReLU6
            d = torch.minimum(d, (x - mod.max_val).abs().min())
        margin[0] = min(margin[0], d.item())

    def pool(mod, inp, out):
        k, s, p = mod.kernel_size, mod.stride, mod.padding
        u = F.pad(inp[0].detach(), (p, p, p, p), value=float("-inf")).unfold(2, k, s)
        top = u.unfold(3, k, s).reshape(*out.shape, k * k).topk(2, dim=-1).values
        gap = (top[..., 0] - top[..., 1])[top[..., 0] > 0]  # all zero: no gradient
        if gap.numel():
            margin[0] = min(margin[0], gap.min().item())

    for mod in model.modules():
        if isinstance(mod, (nn.ReLU, nn.Hardtanh)):
            mod.register_forward_hook(relu)
            mod.inplace = False  # the hook reads the input after the forward
        elif isinstance(mod, nn.MaxPool2d) and isinstance(mod.kernel_size, int):
            mod.register_forward_hook(pool)
    return margin


def sgd_steps(model, x, y, lr, steps):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def reference(name, outdir):
    make, shape, batch, lr, steps, seed = MODELS[name]
    torch.manual_seed(1234)
    model = make()
    export(model, shape, os.path.join(outdir, name + ".onnx"))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    model.train()
    model64 = copy.deepcopy(model).double() if name in FLOAT64_TOO else None
    margin = kink_margin(model)
    sgd_steps(model, x, y, lr, steps)
    out = {"x": x, "y": y.to(torch.int64), "logits": logits,
           "steps": torch.tensor([steps], dtype=torch.int64), "lr": torch.tensor([lr]),
           "margin": torch.tensor([margin[0]])}
    for k, v in model.state_dict().items():
        if v.dtype == torch.float32:
            out["after." + k] = v
    if model64 is not None:
        sgd_steps(model64, x.double(), y, lr, steps)
        for k, v in model64.state_dict().items():
            if v.dtype == torch.float64:
                out["after64." + k] = v.float()
    save_file(out, os.path.join(outdir, name + ".ref.safetensors"))


def error_models(outdir):
    h = onnx.helper
    x = h.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    y = h.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 3, 16, 16])
    scales = h.make_tensor("scales", onnx.TensorProto.FLOAT, [4], [1, 1, 2, 2])
    node = h.make_node("Resize", ["input", "", "scales"], ["logits"], name="upsample")
    g = h.make_graph([node], "g", [x], [y], [scales])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]),
              os.path.join(outdir, "unsupported_op.onnx"))
    x = h.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 784])
    y = h.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 10])
    w = h.make_tensor("fc.weight", onnx.TensorProto.FLOAT, [10, 784], [0.0] * 7840)
    node = h.make_node("Gemm", ["input", "fc.weight"], ["logits"], name="fc", transB=1)
    g = h.make_graph([node], "g", [x], [y], [w])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]),
              os.path.join(outdir, "rank2_input.onnx"))


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: onnx_reference.py DIR [MODEL...] (models: %s)" % ", ".join(MODELS))
    torch.set_num_threads(1)
    for name in sys.argv[2:] or list(MODELS):
        reference(name, sys.argv[1])
    error_models(sys.argv[1])


if __name__ == "__main__":
    main()
