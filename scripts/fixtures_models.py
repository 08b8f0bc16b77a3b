#!/usr/bin/python3
"""PyTorch reference fixtures for nn's models, optimizers and model files.

Run with Debian's interpreter (it has torch):  /usr/bin/python3 scripts/fixtures_models.py [ROOT]
ROOT defaults to tests/fixtures; files go to ROOT/models. scripts/make_fixtures.py calls
write(root) too. Deterministic: fixed seeds, so a rerun writes identical files.

Files (safetensors written by the small writer below; tensors float32 unless noted):
  <model>_keys.txt            expected state_dict of lenet, resnet20, resnet50, resnet101,
                              vgg16, alexnet, mlp, trivial: "name dtype d0,d1,.." per line
                              in state_dict order, then "# params N", from
                              python/hvd_models.py's get_model(name) (torchvision's own
                              resnet50/101, vgg16 and alexnet when it is installed).
  resnet20_weights.safetensors  a resnet20 state_dict as torch holds it (default init,
                              seed 0, batch-norm affine and running statistics perturbed so
                              they matter), num_batches_tracked as I64 scalars.
  <model>_step.safetensors    one SGD step (lr 0.1, momentum 0.9, weight decay 5e-4) of
                              lenet and resnet20 on a batch of 4, computed by torch in
                              float64 from the float32 weights and input:
                                input, labels (I64), logits_eval (eval mode, before the
                                step), logits (training mode), loss [1],
                                grad.<param>, after.<param|buffer> (after the step; I64 for
                                num_batches_tracked)
                              resnet20 starts from resnet20_weights.safetensors; lenet's
                              6.6 MB of weights are not stored: they come from gen_tensor
                              below, which tests/test_nn_model_step.c repeats in C.
                              Tensors with more than SAMPLE_MAX elements are stored as every
                              k-th element, k = ceil(numel / SAMPLE_MAX), plus
                              norm.grad.<name> / norm.after.<name> (F64 [1]): the L2 norm of
                              the whole tensor.
  optim.safetensors           a few steps of torch.optim SGD/Adam/AdamW from p0 with fixed
                              gradients g0..g4 and learning rates lr (F64 [steps]);
                              <config>.step<k> = the parameters after step k.
"""
import json, math, os, struct, sys, zlib

import numpy as np
import torch
import torch.nn as nn

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")
sys.path.insert(0, PEERS)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch_models  # noqa: E402  (lenet, resnet20: the step fixtures' reference definitions)
import hvd_models  # noqa: E402  (every built-in model, as train exports it)

SAMPLE_MAX = 16384
BATCH = 4

# ---------------------------------------------------------------- safetensors I/O
_DT = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64",
       np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}


def st_write(path, tensors):
    """tensors: dict name -> numpy array (order kept). Little-endian, 8-byte aligned data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a)  # not ascontiguousarray: it turns a 0-d array into shape [1]
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DT[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(tmp, path)


def st_read(path):
    rev = {v: k for k, v in _DT.items()}
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b: 8 + n + t], dtype=rev[e["dtype"]]).reshape(e["shape"])
    return out


def state_dict_numpy(sd):
    return {k: v.detach().cpu().numpy().astype(np.int64 if v.dtype == torch.int64 else np.float32)
            for k, v in sd.items()}


# ---------------------------------------------------------------- the models
# python/hvd_models.py is the one PyTorch definition of every built-in model (shipped for
# users: get_model(name)); the torchvision-equivalent classes live there.
REFERENCE = {name: (lambda name=name: hvd_models.get_model(name)) for name in hvd_models.MODEL_NAMES}


def reference_model(name):
    """The reference module; torchvision's own when installed, for the models it has."""
    try:
        import torchvision.models as tvm
        if name in ("resnet18", "resnet50", "resnet101", "vgg16", "vgg16_bn", "alexnet"):
            return getattr(tvm, name)()
    except ImportError:
        pass
    return REFERENCE[name]()


def write_keys(out, name):
    torch.manual_seed(0)
    with torch.no_grad():
        m = reference_model(name)
    lines = []
    for k, v in m.state_dict().items():
        dt = "I64" if v.dtype == torch.int64 else "F32"
        lines.append(f"{k} {dt} {','.join(str(d) for d in v.shape)}".rstrip())
    lines.append(f"# params {sum(p.numel() for p in m.parameters())}")
    with open(os.path.join(out, f"{name}_keys.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------- generated weights (lenet)
def _splitmix(x):
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def gen_tensor(name, shape):
    """Deterministic values for a state_dict entry, repeated bit-exactly in C by
    tests/test_nn_model_step.c: u_i = top 24 bits of splitmix64(crc32(name) * 2^32 + i)
    / 2^24; weights (ndim >= 2) (2u-1)/sqrt(fan_in); .bias 0.1(2u-1); other 1-D .weight
    1 + 0.1(2u-1); running_mean 0.1(2u-1); running_var 1 + 0.5u; counters 3."""
    if name.endswith("num_batches_tracked"):
        return np.array(3, dtype=np.int64)
    numel = int(np.prod(shape)) if len(shape) else 1
    base = np.uint64(zlib.crc32(name.encode()) & 0xFFFFFFFF) << np.uint64(32)
    u = (_splitmix(base + np.arange(numel, dtype=np.uint64)) >> np.uint64(40)).astype(np.float64) / 16777216.0
    if len(shape) >= 2:
        v = (2.0 * u - 1.0) * (1.0 / math.sqrt(numel // shape[0]))
    elif name.endswith(".running_var"):
        v = 1.0 + 0.5 * u
    elif name.endswith(".running_mean") or name.endswith(".bias"):
        v = 0.1 * (2.0 * u - 1.0)
    else:
        v = 1.0 + 0.1 * (2.0 * u - 1.0)
    return v.astype(np.float32).reshape(shape)


# ---------------------------------------------------------------- model step
def _sampled(prefix, name, a, out):
    flat = a.reshape(-1)
    if flat.size > SAMPLE_MAX:
        k = -(-flat.size // SAMPLE_MAX)
        out[f"{prefix}.{name}"] = flat[::k].astype(np.float32)
        out[f"norm.{prefix}.{name}"] = np.array([np.sqrt(np.sum(flat.astype(np.float64) ** 2))])
    else:
        out[f"{prefix}.{name}"] = a.astype(np.float32)


def resnet20_weights():
    torch.manual_seed(0)
    m = torch_models.resnet20()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(1 + 0.1 * torch.randn(c, generator=g))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(1 + 0.5 * torch.rand(c, generator=g))
                mod.num_batches_tracked.fill_(5)
    return state_dict_numpy(m.state_dict())


def write_step(out, name, weights):
    ctor, shape = torch_models.MODELS[name]
    m = ctor().double()
    m.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()}, strict=True)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(BATCH, *shape, generator=g).float()
    y = torch.randint(0, 10, (BATCH,), generator=g)
    res = {"input": x.numpy(), "labels": y.numpy().astype(np.int64)}
    m.eval()
    with torch.no_grad():
        res["logits_eval"] = m(x.double()).float().numpy()
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    opt.zero_grad()
    logits = m(x.double())
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    res["logits"] = logits.detach().float().numpy()
    res["loss"] = np.array([loss.item()], dtype=np.float32)
    for k, p in m.named_parameters():
        _sampled("grad", k, p.grad.numpy(), res)
    opt.step()
    for k, v in m.state_dict().items():
        if v.dtype == torch.int64:
            res[f"after.{k}"] = v.numpy().astype(np.int64)
        else:
            _sampled("after", k, v.numpy(), res)
    st_write(os.path.join(out, f"{name}_step.safetensors"), res)


# ---------------------------------------------------------------- optimizers
OPTIM_STEPS = 5
OPTIM_CONFIGS = {
    # name: (constructor, kwargs)
    "sgd": (torch.optim.SGD, dict()),
    "sgd_wd": (torch.optim.SGD, dict(weight_decay=1e-2)),
    "sgd_momentum": (torch.optim.SGD, dict(momentum=0.9, weight_decay=5e-4)),
    "sgd_nesterov": (torch.optim.SGD, dict(momentum=0.9, nesterov=True, weight_decay=1e-2)),
    "adam": (torch.optim.Adam, dict()),
    "adam_wd": (torch.optim.Adam, dict(weight_decay=1e-2, betas=(0.8, 0.99), eps=1e-6)),
    "adamw": (torch.optim.AdamW, dict(weight_decay=1e-2)),
}


def write_optim(out):
    g = torch.Generator().manual_seed(3)
    n = 37
    p0 = torch.randn(n, generator=g).float().double()
    grads = [torch.randn(n, generator=g).float().double() for _ in range(OPTIM_STEPS)]
    res = {"p0": p0.float().numpy()}
    for k, gk in enumerate(grads):
        res[f"g{k}"] = gk.float().numpy()
    lrs = {"sgd": [0.1, 0.05, 0.2, 0.02, 0.1], "adam": [1e-2, 5e-3, 2e-2, 1e-3, 1e-2]}
    res["lr_sgd"] = np.array(lrs["sgd"], dtype=np.float64)
    res["lr_adam"] = np.array(lrs["adam"], dtype=np.float64)
    for cname, (ctor, kw) in OPTIM_CONFIGS.items():
        p = p0.clone().requires_grad_(True)
        seq = lrs["sgd"] if ctor is torch.optim.SGD else lrs["adam"]
        opt = ctor([p], lr=seq[0], **kw)
        for k in range(OPTIM_STEPS):
            for group in opt.param_groups:
                group["lr"] = float(np.float32(seq[k]))  # nn gets the lr as a float
            p.grad = grads[k].clone()
            opt.step()
            res[f"{cname}.step{k}"] = p.detach().float().numpy()
    st_write(os.path.join(out, "optim.safetensors"), res)


# ---------------------------------------------------------------- entry points
def write(root):
    out = os.path.join(root, "models")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    for name in REFERENCE:
        write_keys(out, name)
    w20 = resnet20_weights()
    st_write(os.path.join(out, "resnet20_weights.safetensors"), w20)
    write_step(out, "resnet20", w20)
    lenet_keys = torch_models.lenet().state_dict()
    write_step(out, "lenet", {k: gen_tensor(k, tuple(v.shape)) for k, v in lenet_keys.items()})
    write_optim(out)


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
    write(os.path.normpath(root))
    print("wrote", os.path.join(os.path.normpath(root), "models"))
