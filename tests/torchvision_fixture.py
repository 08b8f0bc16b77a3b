#!/usr/bin/python3
"""The torchvision side of tests/test_nn_torchvision.c (no internet: random weights).
    torchvision_fixture.py make DIR   for each model of MODELS: torchvision.models.NAME(
        weights=None) with random batch-norm statistics and affine parameters (so that
        eval-mode batch norm does something), DIR/NAME.pth, DIR/NAME.safetensors by
        `hvd_models.py from-torchvision`, and torchvision's eval logits on two random
        224x224 images: DIR/input.safetensors holds "images" [2,3,224,224] and
        "NAME.logits" for each model.
    torchvision_fixture.py check DIR  for each model: DIR/NAME.export.safetensors (nn's
        save of the loaded model) through `hvd_models.py to-torchvision` into a state_dict
        that torchvision loads with strict=True, every tensor bit-identical to NAME.pth's.
Prints one line per model; exit 0 only when all pass."""
import os
import subprocess
import sys

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import hvd_models  # noqa: E402

# name: class count (any count: not only torchvision's 1000). tests/test_nn_torchvision.c
# has the same table.
MODELS = {"vgg16": 1000, "vgg16_bn": 10, "resnet18": 5, "resnet50": 1000}
CONVERTER = os.path.join(HERE, "..", "python", "hvd_models.py")


def convert(verb, name, src, dst):
    """The command line for resnet18 (one start of Python each: the others call the
    same functions in this process)."""
    if name != "resnet18":
        (hvd_models.from_torchvision if verb == "from-torchvision" else hvd_models.to_torchvision)(
            name, src, dst)
        return
    r = subprocess.run([sys.executable, CONVERTER, verb, name, src, dst], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit("FAIL hvd_models.py %s %s: %s" % (verb, name, r.stderr.strip()))


def refused(d):
    """The strict checks: a tensor too many, one missing, a shape off, each refused with a
    message naming it (resnet18: small)."""
    sd = torchvision.models.resnet18(weights=None).state_dict()
    cases = {"extra": dict(sd, **{"fc2.weight": torch.zeros(1)}),
             "missing": {k: v for k, v in sd.items() if k != "layer3.1.bn2.bias"},
             "shape": dict(sd, **{"layer2.0.conv1.weight": torch.zeros(128, 64, 1, 1)})}
    words = {"extra": "fc2.weight", "missing": "layer3.1.bn2.bias", "shape": "layer2.0.conv1.weight"}
    for case, bad in cases.items():
        if case == "shape":  # through the command line: exit status and message
            pth = os.path.join(d, "bad.pth")
            torch.save(bad, pth)
            r = subprocess.run([sys.executable, CONVERTER, "from-torchvision", "resnet18", pth,
                                os.path.join(d, "bad.safetensors")], capture_output=True, text=True)
            rc, msg = r.returncode, r.stderr.strip()
        else:
            try:
                hvd_models.from_torchvision("resnet18", bad, os.path.join(d, "bad.safetensors"))
                rc, msg = 0, ""
            except hvd_models.ConversionError as e:
                rc, msg = 1, str(e)
        if rc == 0 or words[case] not in msg or os.path.exists(os.path.join(d, "bad.safetensors")):
            sys.exit("FAIL from-torchvision took a state_dict with %s (%s): exit %d, %s"
                     % (case, words[case], rc, msg))
        print("ok   from-torchvision refuses a state_dict with %s: %s" % (case, msg))


def make(d):
    refused(d)
    torch.manual_seed(0)
    images = torch.randn(2, 3, 224, 224)
    out = {"images": images}
    for name, classes in MODELS.items():
        model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 2.0)
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)
                    mod.num_batches_tracked.fill_(int(torch.randint(1, 1000, ())))
        model.eval()
        pth = os.path.join(d, name + ".pth")
        torch.save(model.state_dict(), pth)
        convert("from-torchvision", name, pth, os.path.join(d, name + ".safetensors"))
        with torch.no_grad():
            out[name + ".logits"] = model(images).contiguous()
        print("made %-9s %d classes, logits in [%.3g, %.3g]" % (
            name, classes, out[name + ".logits"].min(), out[name + ".logits"].max()))
    hvd_models.save_file(out, os.path.join(d, "input.safetensors"))


def check(d):
    ok = True
    for name, classes in MODELS.items():
        back = os.path.join(d, name + ".back.pth")
        convert("to-torchvision", name, os.path.join(d, name + ".export.safetensors"), back)
        sd = torch.load(back, map_location="cpu")
        orig = torch.load(os.path.join(d, name + ".pth"), map_location="cpu")
        model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
        model.load_state_dict(sd, strict=True)
        bad = [k for k, v in orig.items()
               if k not in sd or sd[k].dtype != v.dtype or not torch.equal(sd[k], v)]
        if list(sd) != list(orig) or bad:
            print("FAIL %s: the round trip changed %s" % (name, bad[:5] or "the order"))
            ok = False
        else:
            print("ok   %-9s torchvision loads the export strict=True, %d tensors bit-identical"
                  % (name, len(sd)))
    return ok


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit("usage: torchvision_fixture.py make|check DIR")
    torch.set_num_threads(2)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif not check(sys.argv[2]):
        sys.exit(1)
