"""The learners' optimizer: torch's Adam kernel, without `torch.optim.Optimizer` around it.

Why not `torch.optim.Adam` itself: every method of torch's `Optimizer` (`step`, `zero_grad`,
`state_dict` ...) is wrapped so that the compiler never traces it, and that wrapper imports the
compiler, `torch._dynamo`, on its first call. That import was the largest part of a learner's start
before its first update (`bench/local.py`, start-up), for a compiler no learner uses. `Adam` below
runs the same functional kernel (`torch.optim.adam.adam`, fused where torch fuses it) with the same
arguments, so the update is torch's to the bit (`tests/rl/test_optim.py`), and its `state_dict` has
torch's layout, so a checkpoint written with either loads into the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam as adam_kernel

SETTINGS = ("lr", "betas", "eps", "weight_decay")
"""The group entries a checkpoint restores; the rest follow the device the learner runs on."""


class Adam:
    """Adam over one group of parameters, with the part of torch's interface the learners use:
    `param_groups` (the learning rate is set there), `zero_grad`, `step`, `state_dict`,
    `load_state_dict`."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        params = list(params)
        device = params[0].device.type if params else "cpu"
        # fused: one kernel per step on CPU and CUDA, about 1.5-2x faster steps for a 64-64 MLP
        # on one CPU thread (per-tensor overhead dominates small networks); same update
        fused = device in ("cpu", "cuda")
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": params,
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": weight_decay,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": fused or None,
                "decoupled_weight_decay": False,
            }
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    def _new_state(self, p: torch.Tensor, fused: bool) -> dict[str, torch.Tensor]:
        # as torch.optim.Adam makes it: a float32 step, on the parameter's device when fused
        step = torch.zeros((), dtype=torch.float32, device=p.device if fused else None)
        return {
            "step": step,
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        for group in self.param_groups:
            fused = bool(group["fused"])
            params, grads, avgs, sqs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients")
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = self._new_state(p, fused)
                params.append(p)
                grads.append(p.grad)
                avgs.append(state["exp_avg"])
                sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            beta1, beta2 = group["betas"]
            adam_kernel(
                params,
                grads,
                avgs,
                sqs,
                [],
                steps,
                foreach=group["foreach"],
                capturable=False,
                differentiable=False,
                fused=group["fused"],
                grad_scale=None,
                found_inf=None,
                has_complex=any(torch.is_complex(p) for p in params),
                decoupled_weight_decay=False,
                amsgrad=False,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
            )

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: per-parameter state by position, groups with positions for params."""
        groups, state, start = [], {}, 0
        for group in self.param_groups:
            positions = list(range(start, start + len(group["params"])))
            for p, i in zip(group["params"], positions, strict=True):
                if p in self.state:
                    state[i] = dict(self.state[p])
            groups.append(
                {**{k: v for k, v in group.items() if k != "params"}, "params": positions}
            )
            start += len(positions)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore `state_dict` output (ours or torch.optim.Adam's) onto the same parameters."""
        groups = saved["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(
                "optimizer state does not match the parameters: groups of "
                f"{[len(g['params']) for g in groups]} saved, "
                f"{[len(g['params']) for g in self.param_groups]} here"
            )
        for group, old in zip(self.param_groups, groups, strict=True):
            group.update({k: old[k] for k in SETTINGS if k in old})
            if isinstance(group["betas"], list):
                group["betas"] = tuple(group["betas"])
            fused = bool(group["fused"])
            for p, i in zip(group["params"], old["params"], strict=True):
                entry = saved["state"].get(i, saved["state"].get(str(i)))
                if entry is None:
                    continue
                self.state[p] = {
                    "step": entry["step"].to(
                        dtype=torch.float32, device=p.device if fused else "cpu"
                    ),
                    "exp_avg": entry["exp_avg"].to(device=p.device, dtype=p.dtype),
                    "exp_avg_sq": entry["exp_avg_sq"].to(device=p.device, dtype=p.dtype),
                }


def adam(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> Adam:
    """The optimizer of every learner (see the module docstring)."""
    return Adam(params, lr=lr, weight_decay=weight_decay)
