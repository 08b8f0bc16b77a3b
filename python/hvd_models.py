"""PyTorch definitions of hvd's built-in models (train --model NAME), whose state_dict
names, shapes and dtypes are exactly those of train's safetensors files, both ways:

    from hvd_models import get_model, load_file
    model = get_model("lenet")                       # Fashion-MNIST's 1x28x28, 10 classes
    model.load_state_dict(load_file("model.safetensors"), strict=True)   # train --export

    save_file(model.state_dict(), "init.safetensors")   # train --init-weights init.safetensors

get_model(name, num_classes=None, in_channels=None, input_size=None) takes the shape of
the data train trained on when it is not the model's default (train builds the model for
its data set: resnet20 on Fashion-MNIST has a 1-channel conv1, lenet on EMNIST letters 27
classes). load_file and save_file are safetensors.torch's when the `safetensors` package
is installed, else the small reader and writer below (the format: an 8-byte little-endian
header length, a JSON header, the raw little-endian data).

The models (nn/models.c builds the same graphs with the same names):
  mlp        flatten, fc1 -> 512, relu, fc2
  lenet      conv1 5x5 32 pad 2, relu, max pool 2; conv2 5x5 64 pad 2, relu, max pool 2;
             fc1 -> 512, relu, fc2
  resnet20   CIFAR ResNet-20: conv1 3x3 16 + bn1, three stages of three BasicBlocks
             (16, 32, 64 channels; downsample = 1x1 conv + bn), global average pool, fc
  resnet18, resnet50, resnet101, vgg16, vgg16_bn, alexnet   torchvision.models'
             definitions and names (resnet v1.5: the stride on the 3x3 conv; vgg16_bn: a
             BatchNorm2d after every conv); torchvision is not needed
  trivial    tf_cnn_benchmarks' TrivialModel: flatten, fc1 -> 1, relu, fc2 -> 4096, relu, fc3
Batch norm is PyTorch's BatchNorm2d (eps 1e-5, momentum 0.1), as nn's.

torchvision's weights (resnet18, resnet50, resnet101, vgg16, vgg16_bn, alexnet: the same
names and shapes as torchvision.models') convert both ways, with load_state_dict(strict=True)'s
checks (every tensor used, none missing, every shape equal), from the command line:

    python3 python/hvd_models.py from-torchvision vgg16 vgg16-397923af.pth vgg16.safetensors
    python3 python/hvd_models.py to-torchvision vgg16 model.safetensors vgg16.pth

or as from_torchvision(name, state_dict_or_path, out_path) and to_torchvision(name,
path_or_state_dict, out_path). The class count is the file's head (any count);
num_batches_tracked, which older torchvision files lack, becomes 0 as PyTorch's own
loading makes it.
"""
import json
import struct

import torch
import torch.nn as nn

__all__ = ["MODEL_NAMES", "DEFAULTS", "TORCHVISION_MODELS", "get_model", "input_shape",
           "load_file", "save_file", "from_torchvision", "to_torchvision", "ConversionError"]

# name: (channels, height = width, classes), nn/models.c's defaults.
DEFAULTS = {
    "mlp": (1, 28, 10),
    "lenet": (1, 28, 10),
    "resnet20": (3, 32, 10),
    "resnet18": (3, 224, 1000),
    "resnet50": (3, 224, 1000),
    "resnet101": (3, 224, 1000),
    "vgg16": (3, 224, 1000),
    "vgg16_bn": (3, 224, 1000),
    "alexnet": (3, 224, 1000),
    "trivial": (3, 227, 1000),
}
MODEL_NAMES = list(DEFAULTS)


class MLP(nn.Module):
    def __init__(self, num_classes=10, in_features=28 * 28):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


class LeNet(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, input_size=(28, 28)):
        super().__init__()
        h, w = input_size
        self.conv1 = nn.Conv2d(in_channels, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (h // 2 // 2) * (w // 2 // 2), 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet20(nn.Module):
    def __init__(self, num_classes=10, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin, stages = 16, []
        for cout, stride in [(16, 1), (32, 2), (64, 2)]:
            blocks = [BasicBlock(cin if k == 0 else cout, cout, stride if k == 0 else 1)
                      for k in range(3)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


class ResNet18(nn.Module):
    """torchvision.models.resnet18: the ImageNet stem and four stages of two BasicBlocks."""

    def __init__(self, num_classes=1000, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for s, planes in enumerate([64, 128, 256, 512]):
            stride = 1 if s == 0 else 2
            setattr(self, "layer%d" % (s + 1), nn.Sequential(
                BasicBlock(cin, planes, stride), BasicBlock(planes, planes, 1)))
            cin = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Bottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck (v1.5: the stride on the 3x3 conv)."""
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision.models.ResNet with Bottleneck blocks (resnet50: [3, 4, 6, 3],
    resnet101: [3, 4, 23, 3])."""

    def __init__(self, layers, num_classes=1000, in_channels=3):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def _make_layer(self, planes, blocks, stride=1):
        ds = None
        if stride != 1 or self.inplanes != planes * 4:
            ds = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                               nn.BatchNorm2d(planes * 4))
        layers = [Bottleneck(self.inplanes, planes, stride, ds)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class VGG16(nn.Module):
    """torchvision.models.vgg16 (configuration D), or vgg16_bn (batch_norm=True: a
    BatchNorm2d after every convolution)."""

    def __init__(self, num_classes=1000, in_channels=3, batch_norm=False):
        super().__init__()
        layers, c = [], in_channels
        for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                  512, 512, 512, "M", 512, 512, 512, "M"]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers.append(nn.Conv2d(c, v, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(v))
                layers.append(nn.ReLU(inplace=True))
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AlexNet(nn.Module):
    """torchvision.models.alexnet."""

    def __init__(self, num_classes=1000, in_channels=3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, 11, 4, 2), nn.ReLU(True), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(True), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(True), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(True),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(True),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class Trivial(nn.Module):
    """tf_cnn_benchmarks' trivial model: affine(1) + relu, affine(4096) + relu, logits."""

    def __init__(self, num_classes=1000, in_features=3 * 227 * 227):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 1)
        self.fc2 = nn.Linear(1, 4096)
        self.fc3 = nn.Linear(4096, num_classes)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))))


def input_shape(name, in_channels=None, input_size=None):
    """(channels, height, width) of one sample of model `name` (train's default data)."""
    c, hw, _ = DEFAULTS[name]
    h, w = (hw, hw) if input_size is None else (
        (input_size, input_size) if isinstance(input_size, int) else tuple(input_size))
    return (in_channels or c, h, w)


def get_model(name, num_classes=None, in_channels=None, input_size=None):
    """A torch.nn.Module of train's model `name` with the state_dict train exports.
    num_classes, in_channels, input_size (an int or (height, width)): the shape of the
    data train trained on, when not the model's default (see DEFAULTS)."""
    if name not in DEFAULTS:
        raise ValueError("unknown model %r; known: %s" % (name, ", ".join(MODEL_NAMES)))
    c, h, w = input_shape(name, in_channels, input_size)
    k = num_classes or DEFAULTS[name][2]
    if name == "mlp":
        return MLP(k, c * h * w)
    if name == "lenet":
        return LeNet(k, c, (h, w))
    if name == "resnet20":
        return ResNet20(k, c)
    if name == "resnet18":
        return ResNet18(k, c)
    if name == "resnet50":
        return ResNet([3, 4, 6, 3], k, c)
    if name == "resnet101":
        return ResNet([3, 4, 23, 3], k, c)
    if name == "vgg16":
        return VGG16(k, c)
    if name == "vgg16_bn":
        return VGG16(k, c, batch_norm=True)
    if name == "alexnet":
        return AlexNet(k, c)
    return Trivial(k, c * h * w)


# ---- safetensors: the official package when installed, else the format by hand ----
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
           "U8": torch.uint8, "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _load_file(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: not a safetensors file (%d bytes)" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("%s: not a safetensors file (header of %d bytes in a %d-byte file)"
                         % (path, n, len(data)))
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + t])  # a writable copy for torch.frombuffer
        dt = _DTYPES[e["dtype"]]
        flat = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = flat.reshape(e["shape"])
    return out


def _save_file(tensors, path, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)  # the data starts 8-byte aligned, as the package does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


try:
    from safetensors.torch import load_file, save_file  # noqa: F401  (the official package)
    SAFETENSORS_PACKAGE = True
except ImportError:
    load_file, save_file = _load_file, _save_file
    SAFETENSORS_PACKAGE = False


# ---- torchvision state_dicts <-> train's safetensors ----
# name: the head's weight, whose first dimension is the class count.
TORCHVISION_MODELS = {"resnet18": "fc.weight", "resnet50": "fc.weight", "resnet101": "fc.weight",
                      "vgg16": "classifier.6.weight", "vgg16_bn": "classifier.6.weight",
                      "alexnet": "classifier.6.weight"}


class ConversionError(ValueError):
    """A state_dict that is not the named architecture's, saying which tensor and why."""


def _state_dict_of(src, what):
    if isinstance(src, str):
        try:
            src = torch.load(src, map_location="cpu")
        except Exception as e:  # a file that is no torch.save output
            raise ConversionError("%s: cannot read it with torch.load (%s)" % (what, e))
    if isinstance(src, nn.Module):
        src = src.state_dict()
    if not isinstance(src, dict) or not all(isinstance(v, torch.Tensor) for v in src.values()):
        raise ConversionError("%s: not a state_dict (a dict of tensor name -> tensor); a "
                              "checkpoint that wraps one: pass checkpoint['state_dict']" % what)
    return src


def _checked(name, sd, what):
    """sd as get_model(name)'s state_dict (its order), with strict=True's checks."""
    if name not in TORCHVISION_MODELS:
        raise ConversionError("unknown torchvision model %r; known: %s"
                              % (name, ", ".join(TORCHVISION_MODELS)))
    head = TORCHVISION_MODELS[name]
    if head not in sd or sd[head].dim() != 2:
        raise ConversionError("%s: no %s (the head of %s): is it a %s state_dict?"
                              % (what, head, name, name))
    first = next(iter(sd.values()))
    ref = get_model(name, num_classes=int(sd[head].shape[0]),
                    in_channels=int(first.shape[1]) if first.dim() == 4 else None).state_dict()
    extra = [k for k in sd if k not in ref]
    missing = [k for k in ref if k not in sd and not k.endswith("num_batches_tracked")]
    if extra or missing:
        raise ConversionError("%s is not torchvision's %s: %s%s%s" % (
            what, name, "unexpected %s" % ", ".join(extra[:5]) if extra else "",
            "; " if extra and missing else "", "missing %s" % ", ".join(missing[:5]) if missing else ""))
    out = {}
    for k, r in ref.items():
        if k not in sd:  # older torchvision files: PyTorch's BatchNorm fills it with 0 too
            out[k] = torch.zeros((), dtype=torch.int64)
            continue
        v = sd[k]
        if tuple(v.shape) != tuple(r.shape):
            raise ConversionError("%s: %s has shape %s, %s's is %s" % (
                what, k, list(v.shape), name, list(r.shape)))
        if r.dtype == torch.int64 and v.dtype != torch.int64:
            raise ConversionError("%s: %s is %s, expected int64" % (what, k, v.dtype))
        if r.dtype == torch.float32 and not v.dtype.is_floating_point:
            raise ConversionError("%s: %s is %s, expected a floating-point tensor" % (what, k, v.dtype))
        out[k] = v.detach().to(r.dtype).contiguous()
    return out


def from_torchvision(name, src, out_path=None):
    """A torchvision state_dict of model `name` (a dict, a module, or a .pth path) as the
    safetensors tensors train --init-weights reads (written to out_path when given)."""
    sd = _checked(name, _state_dict_of(src, src if isinstance(src, str) else "the state_dict"),
                  src if isinstance(src, str) else "the state_dict")
    if out_path:
        save_file(sd, out_path)
    return sd


def to_torchvision(name, src, out_path=None):
    """train's safetensors of model `name` (a path or a dict) as a state_dict that
    torchvision.models.NAME(num_classes=...) loads with strict=True (torch.save'd to
    out_path when given)."""
    what = src if isinstance(src, str) else "the tensors"
    try:
        tensors = load_file(src) if isinstance(src, str) else dict(src)
    except Exception as e:
        raise ConversionError("%s: not a readable safetensors file (%s)" % (what, e))
    sd = _checked(name, tensors, what)
    if out_path:
        torch.save(sd, out_path)
    return sd


def _main(argv):
    import sys
    usage = ("usage: hvd_models.py from-torchvision MODEL IN.pth OUT.safetensors\n"
             "       hvd_models.py to-torchvision MODEL IN.safetensors OUT.pth\n"
             "MODEL: " + ", ".join(TORCHVISION_MODELS))
    if len(argv) != 4 or argv[0] not in ("from-torchvision", "to-torchvision"):
        print(usage, file=sys.stderr)
        return 2
    cmd, name, src, dst = argv
    try:
        sd = (from_torchvision if cmd == "from-torchvision" else to_torchvision)(name, src, dst)
    except (ConversionError, OSError) as e:
        print("hvd_models.py %s: %s" % (cmd, e), file=sys.stderr)
        return 1
    print("hvd_models.py: wrote %s (%s, %d tensors, %d classes)"
          % (dst, name, len(sd), sd[TORCHVISION_MODELS[name]].shape[0]))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(_main(sys.argv[1:]))
