#!/usr/bin/python3
"""Live round trip of model files between nn and PyTorch (needs Debian's python3-torch;
run as /usr/bin/python3 scripts/torch_roundtrip.py after `make`).

1. nn -> torch: build/tests/test_nn_model_safetensors --export DIR writes lenet and
   resnet20 (after one training step) and the logits nn computes on an input; this script
   loads each file into python/hvd_models.py's get_model(name), the definitions shipped to
   users, with load_state_dict(strict=True) and compares eval- and training-mode logits.
   With --all, also mlp, trivial, resnet50, resnet101, vgg16 and alexnet at their init
   (eval logits only: training mode has dropout; torchvision's own definitions of the
   last four when it is installed): checks the graph, not only the names.
2. torch -> nn: this script trains each reference model (scripts/peers/torch_models.py,
   the fixtures' definitions of lenet and resnet20) one step, writes its state_dict
   and logits; test_nn_model_safetensors --check DIR loads them into nn and compares.
Exit status 0 only when both directions agree within 1e-4 relative error."""
import os, subprocess, sys, tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixtures_models as fx  # noqa: E402  (safetensors reader/writer, reference models)
from torch_models import MODELS  # noqa: E402

TOL = 1e-4
ROOT = os.path.normpath(os.path.join(HERE, ".."))
BIN = os.path.join(ROOT, os.environ.get("HVD_BUILD", "build"), "tests", "test_nn_model_safetensors")


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-6))


def nn_to_torch(d, names):
    subprocess.run([BIN, "--export", d] + names, check=True, cwd=ROOT)
    ok = True
    for name in names:
        m = fx.reference_model(name)
        sd = {k: torch.from_numpy(np.array(v)) for k, v in fx.st_read(os.path.join(d, f"{name}.safetensors")).items()}
        m.load_state_dict(sd, strict=True)  # raises on any missing/extra/mis-shaped tensor
        for k, v in m.state_dict().items():
            if k.endswith("num_batches_tracked"):
                assert v.dtype == torch.int64 and v.shape == (), (k, v)
        io = fx.st_read(os.path.join(d, f"{name}_io.safetensors"))
        x = torch.from_numpy(np.array(io["input"]))
        with torch.no_grad():
            m.eval(); e_eval = rel_err(m(x).numpy(), io["logits_eval"])
            m.train()
            has_dropout = any(isinstance(mod, torch.nn.Dropout) for mod in m.modules())
            e_train = 0.0 if has_dropout else rel_err(m(x).numpy(), io["logits"])
        good = e_eval < TOL and e_train < TOL
        ok &= good
        print(f"nn -> torch {name:9s} strict load OK, logits rel err eval {e_eval:.2e} train {e_train:.2e} {'OK' if good else 'FAIL'}")
    return ok


def torch_to_nn(d):
    torch.manual_seed(5)
    for name in ("lenet", "resnet20"):
        ctor, shape = MODELS[name]
        m = ctor()
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        x = torch.randn(8, *shape); y = torch.randint(0, 10, (8,))
        m.train(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
        fx.st_write(os.path.join(d, f"{name}.safetensors"), fx.state_dict_numpy(m.state_dict()))
        x = torch.randn(8, *shape)
        with torch.no_grad():
            m.eval(); le = m(x).numpy()
            m.train(); lt = m(x).numpy()
        fx.st_write(os.path.join(d, f"{name}_io.safetensors"), {"input": x.numpy(), "logits_eval": le, "logits": lt})
    r = subprocess.run([BIN, "--check", d], cwd=ROOT)
    print(f"torch -> nn: {'OK' if r.returncode == 0 else 'FAIL'}")
    return r.returncode == 0


if __name__ == "__main__":
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN} not found: run `make` first")
    torch.set_num_threads(1)
    names = ["lenet", "resnet20"]
    if "--all" in sys.argv[1:]:
        names += ["mlp", "trivial", "resnet50", "resnet101", "vgg16", "alexnet"]
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        ok = nn_to_torch(d1, names) & torch_to_nn(d2)
    print("round trip:", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)
