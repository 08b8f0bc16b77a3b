#!/usr/bin/python3
"""bench/torch_layer_bench.py: the shapes of bench/nn_layer_bench.c in PyTorch (CPU),
median ms of forward and backward (grad of x and of the weights) per layer.
Usage: /usr/bin/python3 bench/torch_layer_bench.py [--threads N] [--batch N] [--reps N]
       [--min] [--warmup N] [--shapes FILE | --stdin]
--shapes FILE: the layers of FILE instead of the built-in ones, in nn_layer_bench's
format (ID KIND N C_IN H W C_OUT K STRIDE PAD [nodx] per line; KIND conv, bn, relu,
maxpool, gap, fc or add; N is that line's batch; nodx: no input gradient, as a network's
first convolution), as scripts/roofline.py writes it. add is timed forward only. With
--shapes each line also has the fastest forward and backward rep (fwd_min, bwd_min).
--stdin: the same lines read one at a time from stdin, each answered (and flushed) before
the next is read, so a caller can alternate layer by layer with another program."""
import argparse, sys, time
import torch, torch.nn.functional as F

LAYERS = [
    ("r20 conv1 3->16 3x3 32x32", "c", 3, 32, 32, 16, 3, 1, 1),
    ("r20 conv 16->16 3x3 32x32", "c", 16, 32, 32, 16, 3, 1, 1),
    ("r20 conv 16->32 3x3 s2 32x32", "c", 16, 32, 32, 32, 3, 2, 1),
    ("r20 conv 16->32 1x1 s2 32x32", "c", 16, 32, 32, 32, 1, 2, 0),
    ("r20 conv 32->32 3x3 16x16", "c", 32, 16, 16, 32, 3, 1, 1),
    ("r20 conv 32->64 3x3 s2 16x16", "c", 32, 16, 16, 64, 3, 2, 1),
    ("r20 conv 64->64 3x3 8x8", "c", 64, 8, 8, 64, 3, 1, 1),
    ("r20 bn 16x32x32", "b", 16, 32, 32, 0, 0, 0, 0),
    ("r20 bn 32x16x16", "b", 32, 16, 16, 0, 0, 0, 0),
    ("r20 bn 64x8x8", "b", 64, 8, 8, 0, 0, 0, 0),
    ("r20 relu 16x32x32", "r", 16, 32, 32, 0, 0, 0, 0),
    ("lenet conv1 1->32 5x5 28x28", "c", 1, 28, 28, 32, 5, 1, 2),
    ("lenet conv2 32->64 5x5 14x14", "c", 32, 14, 14, 64, 5, 1, 2),
    ("lenet maxpool 32x28x28", "m", 32, 28, 28, 0, 2, 2, 0),
    ("lenet fc1 3136->512", "l", 3136, 1, 1, 512, 0, 0, 0),
    ("lenet fc2 512->10", "l", 512, 1, 1, 10, 0, 0, 0),
]

KINDS = {"conv": "c", "bn": "b", "relu": "r", "maxpool": "m", "gap": "g", "fc": "l",
         "add": "a"}


def parse_shape(line, where):
    """(name, kind, cin, h, w, cout, k, stride, pad, batch, no_dx) of one shapes line, None
    for a blank or comment line; exits naming `where` on a bad one."""
    words = line.split()
    if not words or words[0].startswith("#"):
        return None
    ok = len(words) in (10, 11) and words[1] in KINDS and \
        (len(words) == 10 or words[10] == "nodx")
    try:
        n, cin, h, w, cout, k, s, p = (int(v) for v in words[2:10])
    except ValueError:
        ok = False
    if not ok:
        sys.exit(f"torch_layer_bench: {where}: expected ID KIND N C_IN H W C_OUT K STRIDE "
                 f"PAD [nodx], KIND one of {', '.join(KINDS)}; got: {line.rstrip()}")
    return (words[0], KINDS[words[1]], cin, h, w, cout, k, s, p, n, len(words) == 11)


def read_shapes(path):
    """The layers of a shapes file, as parse_shape gives them."""
    with open(path) as f:
        out = [parse_shape(line, f"{path}:{i}") for i, line in enumerate(f, 1)]
    out = [x for x in out if x]
    if not out:
        sys.exit(f"torch_layer_bench: {path} lists no layer")
    return out


def make_layer(kind, cin, cout, k, s, p):
    """The module of one layer, or for add and gap a function of x (add: x + x2)."""
    if kind == "c":
        return torch.nn.Conv2d(cin, cout, k, s, p, bias=False)
    if kind == "b":
        return torch.nn.BatchNorm2d(cin)
    if kind == "m":
        return torch.nn.MaxPool2d(k, s, p)
    if kind == "r":
        return torch.nn.ReLU()
    if kind == "g":
        return lambda x: F.adaptive_avg_pool2d(x, 1)
    if kind == "l":
        return torch.nn.Linear(cin, cout)
    x2 = None
    def add(x):
        nonlocal x2
        if x2 is None or x2.shape != x.shape:
            x2 = torch.randn_like(x)
        return x + x2
    return add


def time_layer(kind, cin, h, w, cout, k, s, p, batch, no_dx, reps, warmup, use_min):
    """Median (or fastest) ms of forward and of backward over reps, after warmup
    untimed rounds, then the fastest of each.
    Gradients are dropped before each rep (outside the timing) so backward writes fresh
    ones rather than adding into the last rep's, as after zero_grad(set_to_none=True)."""
    shape = (batch, cin) if kind == "l" else (batch, cin, h, w)
    x = torch.randn(*shape, requires_grad=not no_dx and kind != "a")
    mod = make_layer(kind, cin, cout, k, s, p)
    params = list(mod.parameters()) if isinstance(mod, torch.nn.Module) else []
    dy = None
    tf, tb = [], []
    for r in range(reps + warmup):
        x.grad = None
        for q in params:
            q.grad = None
        t0 = time.perf_counter()
        y = mod(x)
        t1 = time.perf_counter()
        if kind != "a":  # add's backward is no kernel (autograd passes dy on as is)
            if dy is None:
                dy = torch.randn_like(y)
            y.backward(dy)
        t2 = time.perf_counter()
        if r >= warmup:
            tf.append((t1 - t0) * 1e3); tb.append((t2 - t1) * 1e3)
    tf.sort(); tb.sort()
    at = 0 if use_min else len(tf) // 2
    return tf[at], tb[at], tf[0], tb[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min", action="store_true",
                    help="the fastest rep instead of the median (for a loaded machine)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed rounds before the timed ones, per layer")
    ap.add_argument("--shapes", metavar="FILE",
                    help="time the layers of FILE (nn_layer_bench's format) instead")
    ap.add_argument("--stdin", action="store_true",
                    help="as --shapes, one line at a time from stdin, each answered at once "
                         "(scripts/roofline.py alternates layer by layer with ours)")
    a = ap.parse_args()
    if a.reps < 1:
        sys.exit(f"torch_layer_bench: --reps {a.reps}: expected 1 or more")
    if a.warmup < 0:
        sys.exit(f"torch_layer_bench: --warmup {a.warmup}: expected 0 or more")
    torch.set_num_threads(a.threads)
    stat = "fastest" if a.min else "median"
    if a.stdin:
        print(f"# torch {torch.__version__} threads {a.threads}, shapes from stdin, reps "
              f"{a.reps} ({stat} ms)")
        print(f"{'layer':32s} {'forward':>9s} {'backward':>9s} {'fwd_min':>9s} {'bwd_min':>9s}",
              flush=True)
        for i, line in enumerate(sys.stdin, 1):
            L = parse_shape(line, f"stdin:{i}")
            if L:
                f, b, fmin, bmin = time_layer(*L[1:], a.reps, a.warmup, a.min)
                print(f"{L[0]:32s} {f:9.4f} {b:9.4f} {fmin:9.4f} {bmin:9.4f}", flush=True)
        return
    if a.shapes:
        layers = read_shapes(a.shapes)
        print(f"# torch {torch.__version__} threads {a.threads}, batch of each line of "
              f"{a.shapes}, reps {a.reps} ({stat} ms)")
        fmt = "{:32s} {:9.4f} {:9.4f}"
        print(f"{'layer':32s} {'forward':>9s} {'backward':>9s} {'fwd_min':>9s} {'bwd_min':>9s}")
    else:
        layers = [row + (a.batch, False) for row in LAYERS]
        print(f"# torch {torch.__version__} threads {a.threads} batch {a.batch} reps "
              f"{a.reps} ({stat} ms)")
        fmt = "{:32s} {:9.3f} {:9.3f}"
        print(f"{'layer':32s} {'forward':>9s} {'backward':>9s}")
    sf = sb = 0.0
    for name, kind, cin, h, w, cout, k, s, p, batch, no_dx in layers:
        f, b, fmin, bmin = time_layer(kind, cin, h, w, cout, k, s, p, batch, no_dx, a.reps,
                                      a.warmup, a.min)
        if a.shapes:  # with the fastest reps, for the roofline report's % of peak
            print(f"{name:32s} {f:9.4f} {b:9.4f} {fmin:9.4f} {bmin:9.4f}", flush=True)
        else:
            print(fmt.format(name, f, b), flush=True)
        sf += f; sb += b
    print(fmt.format("sum", sf, sb))


if __name__ == "__main__":
    main()
