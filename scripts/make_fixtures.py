#!/usr/bin/python3
"""Writes the PyTorch reference fixtures the C tests compare against.

Run with Debian's interpreter (it has torch): /usr/bin/python3 scripts/make_fixtures.py
Writes tests/fixtures/layers/<case>.safetensors: for each layer case the inputs,
parameters, a random output gradient dy, the outputs and every gradient, computed by
torch in float64 and stored as float32, plus an I64 tensor "config" with the layer's
shape arguments (see each case). Then, if scripts/fixtures_models.py exists, calls its
write(root) for the full-model fixtures. Deterministic: fixed seeds and one thread, so a
rerun writes identical files.
"""
import os, sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))
sys.path.insert(0, HERE)  # fixtures_models, the safetensors writer and the model fixtures

def st_write(path, tensors):
    """Writes a dict name -> tensor as safetensors (header order = insertion order), through
    fixtures_models.st_write (one writer): float64 tensors are stored as float32."""
    import fixtures_models
    arrays = {}
    for name, t in tensors.items():
        t = t.detach().contiguous()
        arrays[name] = (t.float() if t.dtype == torch.float64 else t).numpy()
    fixtures_models.st_write(path, arrays)


def rand(*shape):
    """Uniform [-1, 1) float32 values, returned as float64 (exactly representable)."""
    return (torch.rand(*shape, dtype=torch.float32) * 2 - 1).double()


def f32(t):
    """Rounds to float32 and back, so torch computes on exactly the stored values."""
    return t.float().double()


def grads(out, dy, inputs):
    """d(sum(out * dy)) / d(inputs), float64."""
    return torch.autograd.grad(out, inputs, dy, allow_unused=True)


def conv_case(out, name, n, cin, h, w, cout, kh, kw, sh, sw, ph, pw, bias):
    # config: n c_in h_in w_in c_out kh kw stride_h stride_w pad_h pad_w bias
    x = rand(n, cin, h, w).requires_grad_()
    wt = rand(cout, cin, kh, kw).mul_(0.5).requires_grad_()
    b = rand(cout).requires_grad_() if bias else None
    y = F.conv2d(x, wt, b, stride=(sh, sw), padding=(ph, pw))
    dy = rand(*y.shape)
    ins = [x, wt] + ([b] if bias else [])
    g = grads(y, dy, ins)
    t = {"config": torch.tensor([n, cin, h, w, cout, kh, kw, sh, sw, ph, pw, int(bias)]),
         "x": x, "weight": wt}
    if bias:
        t["bias"] = b
    t.update({"y": y, "dy": dy, "dx": g[0], "dweight": g[1]})
    if bias:
        t["dbias"] = g[2]
    st_write(os.path.join(out, name + ".safetensors"), t)


def batchnorm_case(out, name, n, c, h, w):
    # config: n c h w ; eps 1e-5, momentum 0.1 (PyTorch defaults)
    bn = torch.nn.BatchNorm2d(c).double()
    with torch.no_grad():
        bn.weight.copy_(f32(rand(c) + 1.5))
        bn.bias.copy_(rand(c))
        bn.running_mean.copy_(rand(c))
        bn.running_var.copy_(f32(rand(c).abs() + 0.5))
    rm0, rv0 = bn.running_mean.clone(), bn.running_var.clone()
    x = f32(rand(n, c, h, w) * 2 + 0.3).requires_grad_()
    bn.train()
    y = bn(x)
    dy = rand(*y.shape)
    gx, gg, gb = grads(y, dy, [x, bn.weight, bn.bias])
    bn.eval()
    with torch.no_grad():
        y_infer = bn(x)
    st_write(os.path.join(out, name + ".safetensors"), {
        "config": torch.tensor([n, c, h, w]), "x": x, "weight": bn.weight, "bias": bn.bias,
        "running_mean_before": rm0, "running_var_before": rv0,
        "y": y, "running_mean_after": bn.running_mean, "running_var_after": bn.running_var,
        "y_infer": y_infer, "dy": dy, "dx": gx, "dweight": gg, "dbias": gb})


def pool_case(out, name, kind, n, c, h, w, kh, kw, sh, sw, ph, pw):
    # config: n c h_in w_in kh kw stride_h stride_w pad_h pad_w
    x = rand(n, c, h, w).requires_grad_()
    if kind == "max":
        y = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw))
    else:
        y = F.avg_pool2d(x, (kh, kw), (sh, sw), (ph, pw), count_include_pad=True)
    dy = rand(*y.shape)
    (gx,) = grads(y, dy, [x])
    st_write(os.path.join(out, name + ".safetensors"), {
        "config": torch.tensor([n, c, h, w, kh, kw, sh, sw, ph, pw]),
        "x": x, "y": y, "dy": dy, "dx": gx})


def global_avgpool_case(out, name, n, c, h, w):
    x = rand(n, c, h, w).requires_grad_()
    y = x.mean(dim=(2, 3))
    dy = rand(*y.shape)
    (gx,) = grads(y, dy, [x])
    st_write(os.path.join(out, name + ".safetensors"), {
        "config": torch.tensor([n, c, h, w]), "x": x, "y": y, "dy": dy, "dx": gx})


def relu_add_case(out, name, n):
    a, b = rand(n), rand(n)
    a[::7] = 0.0  # relu'(0) = 0 in PyTorch
    a.requires_grad_()
    y = torch.relu(a)
    dy = rand(n)
    (gx,) = grads(y, dy, [a])
    st_write(os.path.join(out, name + ".safetensors"), {
        "config": torch.tensor([n]), "a": a, "b": b, "relu_y": y, "dy": dy, "relu_dx": gx,
        "add_y": a + b})


def linear_case(out, name, n, fin, fout, bias):
    # config: n in out bias
    x = rand(n, fin).requires_grad_()
    wt = rand(fout, fin).requires_grad_()
    b = rand(fout).requires_grad_() if bias else None
    y = F.linear(x, wt, b)
    dy = rand(*y.shape)
    ins = [x, wt] + ([b] if bias else [])
    g = grads(y, dy, ins)
    t = {"config": torch.tensor([n, fin, fout, int(bias)]), "x": x, "weight": wt}
    if bias:
        t["bias"] = b
    t.update({"y": y, "dy": dy, "dx": g[0], "dweight": g[1]})
    if bias:
        t["dbias"] = g[2]
    st_write(os.path.join(out, name + ".safetensors"), t)


def softmax_ce_case(out, name, n, k):
    z = rand(n, k) * 4
    z[1] += 1000.0  # large logits: the stable form must not overflow
    z = f32(z)
    labels = torch.randint(0, k, (n,), dtype=torch.int64)
    z.requires_grad_()
    loss = F.cross_entropy(z, labels)  # mean over the batch
    (gz,) = torch.autograd.grad(loss, [z])
    correct = (z.argmax(dim=1) == labels).sum()
    st_write(os.path.join(out, name + ".safetensors"), {
        "config": torch.tensor([n, k]), "logits": z, "labels": labels.int(),
        "loss": loss.reshape(1), "correct": correct.reshape(1), "dlogits": gz})


def write_layers(root):
    out = os.path.join(root, "layers")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    conv_case(out, "conv2d_3x3_s1_p1_nobias", 4, 3, 8, 8, 5, 3, 3, 1, 1, 1, 1, False)
    conv_case(out, "conv2d_3x3_s2_p1_nobias", 3, 4, 9, 8, 6, 3, 3, 2, 2, 1, 1, False)
    conv_case(out, "conv2d_5x5_p2_bias", 3, 2, 9, 7, 4, 5, 5, 1, 1, 2, 2, True)
    conv_case(out, "conv2d_3x2_s2x1_p1x0_bias", 3, 3, 7, 6, 4, 3, 2, 2, 1, 1, 0, True)
    conv_case(out, "conv2d_1x1_bias", 3, 6, 5, 4, 5, 1, 1, 1, 1, 0, 0, True)
    conv_case(out, "conv2d_1x1_s2_nobias", 3, 4, 7, 7, 6, 1, 1, 2, 2, 0, 0, False)
    conv_case(out, "conv2d_7x7_s2_p3_nobias", 2, 3, 15, 13, 4, 7, 7, 2, 2, 3, 3, False)
    batchnorm_case(out, "batchnorm2d", 4, 5, 6, 7)
    batchnorm_case(out, "batchnorm2d_1x1", 8, 6, 1, 1)
    pool_case(out, "maxpool2d_2x2_s2", "max", 3, 4, 8, 20, 2, 2, 2, 2, 0, 0)  # 4-wide path + tail
    pool_case(out, "maxpool2d_3x3_s2_p1", "max", 3, 4, 9, 8, 3, 3, 2, 2, 1, 1)
    pool_case(out, "avgpool2d_3x3_s2_p1", "avg", 3, 4, 9, 8, 3, 3, 2, 2, 1, 1)
    pool_case(out, "avgpool2d_2x3_s1x2", "avg", 2, 3, 6, 7, 2, 3, 1, 2, 0, 1)
    global_avgpool_case(out, "global_avgpool", 3, 5, 6, 7)
    relu_add_case(out, "relu_add", 999)
    linear_case(out, "linear_bias", 5, 13, 7, True)
    linear_case(out, "linear_nobias", 4, 9, 11, False)
    softmax_ce_case(out, "softmax_cross_entropy", 9, 10)
    # Added last, so that the cases above keep their random draws and files: a 16-channel
    # stride-1 3x3 convolution on an odd plane, which nn computes by its direct kernel
    # (nn/conv_direct.c) in y, dx and dW.
    conv_case(out, "conv2d_3x3_s1_p1_16ch_nobias", 3, 16, 11, 19, 16, 3, 3, 1, 1, 1, 1, False)
    # The direct kernel in place of Winograd (32 channels), and its stride-2 forward on
    # column planes (16 -> 32, odd plane, 9 output columns).
    conv_case(out, "conv2d_3x3_s1_p1_32ch_bias", 2, 32, 9, 11, 32, 3, 3, 1, 1, 1, 1, True)
    conv_case(out, "conv2d_3x3_s2_p1_16to32_nobias", 2, 16, 13, 17, 32, 3, 3, 2, 2, 1, 1, False)
    return out


def main():
    torch.set_num_threads(1)
    root = os.path.normpath(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    print("wrote", write_layers(root))
    import fixtures_models
    fixtures_models.write(root)
    print("wrote", os.path.join(root, "models"))


if __name__ == "__main__":
    main()
