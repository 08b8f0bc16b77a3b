"""horovod.torch.functions: the same start on every rank (parameters, optimizer state)."""
import torch

from .. import broadcast_object, global_process_set, rank, synchronize
from ..process_sets import resolve


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's tensors with root_rank's, in place. params: a state_dict
    (or any name -> tensor mapping, sent in sorted name order) or model.named_parameters()
    / a list of (name, tensor) pairs or of tensors."""
    from . import broadcast_async_
    resolve(process_set, "broadcast_parameters")
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        try:
            items = list(params)
        except TypeError:
            raise ValueError("hvd.torch.broadcast_parameters: params must be a dict or an "
                             "iterable of (name, tensor) pairs, not %s" % type(params).__name__)
        items = [p if isinstance(p, tuple) else (None, p) for p in items]
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError("hvd.torch.broadcast_parameters: %s is a %s, not a tensor"
                             % (name, type(p).__name__))
        handles.append(broadcast_async_(p, root_rank,
                                        None if name is None else "bcast." + str(name),
                                        process_set))
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Gives every rank root_rank's optimizer state and hyperparameters (the whole
    state_dict, pickled once; hvd.torch is CPU-only, so its tensors travel as they are)."""
    resolve(process_set, "broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("hvd.torch.broadcast_optimizer_state: LBFGS is not supported")
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None,
                             root_rank, name="bcast.optimizer_state", process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)
