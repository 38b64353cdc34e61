"""Networks: observation encoders (MLP input, CNN stem), PPO actor-critic, DDPG actor and critic.

Observations reach a model as a dict of tensors with keys `low_dim` (a flat state vector) and/or
`pixel` (uint8 frames, channels first, stacked along the channel axis). Pixels stay uint8 all the
way to the model and are scaled to [0, 1] there, on the model's device: that moves 4x fewer bytes
through replay and over the wire, and the division runs on the GPU when there is one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from surreal_kube.experiment.algorithms import CNNConfig, RNNConfig

ObsShapes = Mapping[str, tuple[int, ...]]


def scale_uint8(x: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> float32 in [0, 1] (on x's device); other dtypes -> float32 unchanged."""
    if x.dtype == torch.uint8:
        return x.float().div_(255.0)
    return x.float()


def init_layer(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights, zero bias: the initialization that keeps deep tanh MLPs trainable."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: type[nn.Module] = nn.Tanh,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """Fully connected layers with `activation` between them and a linear output."""
    layers: list[nn.Module] = []
    last = in_dim
    for size in hidden:
        layers += [init_layer(nn.Linear(last, size), math.sqrt(2)), activation()]
        last = size
    layers.append(init_layer(nn.Linear(last, out_dim), out_gain))
    return nn.Sequential(*layers)


class CNNStem(nn.Module):
    """Conv layers (kernel 8/4/3..., stride 4/2/1...) then a linear layer to `features`."""

    def __init__(self, shape: tuple[int, int, int], config: CNNConfig) -> None:
        super().__init__()
        kernels, strides = [8, 4, 3, 3], [4, 2, 1, 1]
        layers: list[nn.Module] = []
        channels = shape[0]
        for i, out in enumerate(config.channels):
            k, s = kernels[min(i, 3)], strides[min(i, 3)]
            layers += [nn.Conv2d(channels, out, k, s), nn.ReLU()]
            channels = out
        layers.append(nn.Flatten())
        self.conv = nn.Sequential(*layers)
        with torch.no_grad():
            n = self.conv(torch.zeros(1, *shape)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n, config.features), nn.ReLU())
        self.out_dim = config.features

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 or float frames (N, C, H, W) -> features (N, features)."""
        out: torch.Tensor = self.fc(self.conv(scale_uint8(pixels)))
        return out


class ObsEncoder(nn.Module):
    """Turns an observation dict into one feature vector: low_dim as is, pixels through a CNN."""

    def __init__(self, shapes: ObsShapes, cnn: CNNConfig | None = None) -> None:
        super().__init__()
        unknown = set(shapes) - {"low_dim", "pixel"}
        if unknown:
            raise ValueError(f"unknown observation keys {sorted(unknown)}; use low_dim / pixel")
        self.low_dim = int(math.prod(shapes["low_dim"])) if "low_dim" in shapes else 0
        self.cnn: CNNStem | None = None
        if "pixel" in shapes:
            shape = shapes["pixel"]
            if len(shape) != 3:
                raise ValueError(f"pixel observations must be (C, H, W), got {shape}")
            self.cnn = CNNStem(tuple(shape), cnn or CNNConfig())  # type: ignore[arg-type]
        self.out_dim = self.low_dim + (self.cnn.out_dim if self.cnn else 0)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """obs tensors with one leading batch axis -> (N, out_dim)."""
        parts = []
        if self.low_dim:
            x = obs["low_dim"]
            parts.append(x.reshape(x.shape[0], -1).float())
        if self.cnn is not None:
            parts.append(self.cnn(obs["pixel"]))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _flatten_time(obs: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int, int]:
    first = next(iter(obs.values()))
    b, t = first.shape[0], first.shape[1]
    return {k: v.reshape(b * t, *v.shape[2:]) for k, v in obs.items()}, b, t


LSTMState = tuple[torch.Tensor, torch.Tensor]


class PPOModel(nn.Module):
    """PPO actor and critic, with optional CNN and LSTM stems shared by both heads.

    The model always works on sequences (B, T, ...): without an LSTM, T is folded into the batch;
    with one, the LSTM runs over each sub-trajectory from the hidden state the agent had at its
    first step (`state`, each (layers, B, hidden)).
    """

    def __init__(
        self,
        obs_shapes: ObsShapes,
        info_dim: int,
        action_dim: int,
        discrete: bool,
        hidden_sizes: Sequence[int] = (64, 64),
        init_log_sig: float = -1.0,
        rnn: RNNConfig | None = None,
        cnn: CNNConfig | None = None,
    ) -> None:
        super().__init__()
        self.encoder = ObsEncoder(obs_shapes, cnn)
        self.discrete = discrete
        feat = self.encoder.out_dim
        self.rnn: nn.LSTM | None = None
        if rnn is not None and rnn.enabled:
            self.rnn = nn.LSTM(feat, rnn.hidden_size, rnn.layers, batch_first=True)
            feat = rnn.hidden_size
        out = info_dim if discrete else action_dim
        self.actor = mlp(feat, hidden_sizes, out, out_gain=0.01)
        self.log_std = None if discrete else nn.Parameter(torch.full((action_dim,), init_log_sig))
        self.critic = mlp(feat, hidden_sizes, 1, out_gain=1.0)

    def initial_state(self, batch: int = 1, device: torch.device | None = None) -> LSTMState | None:
        """Zero LSTM state (None without an LSTM)."""
        if self.rnn is None:
            return None
        shape = (self.rnn.num_layers, batch, self.rnn.hidden_size)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def features(
        self, obs: Mapping[str, torch.Tensor], state: LSTMState | None = None
    ) -> tuple[torch.Tensor, LSTMState | None]:
        """Sequences (B, T, ...) -> features (B, T, F) and the final LSTM state."""
        flat, b, t = _flatten_time(obs)
        x = self.encoder(flat).reshape(b, t, -1)
        if self.rnn is None:
            return x, None
        if state is None:
            state = self.initial_state(b, x.device)
        x, new_state = self.rnn(x, state)
        return x, new_state

    def policy_info(self, features: torch.Tensor) -> torch.Tensor:
        """Distribution info: logits, or concat(mean, log_std)."""
        out: torch.Tensor = self.actor(features)
        if self.log_std is None:
            return out
        return torch.cat([out, self.log_std.expand_as(out)], dim=-1)

    def value(self, features: torch.Tensor) -> torch.Tensor:
        """The critic head's output, shape features.shape[:-1]: V(s), in the units of the
        learner's value normalizer when it has one (`PPOLearner._values` maps them back)."""
        out: torch.Tensor = self.critic(features).squeeze(-1)
        return out

    def actor_parameters(self) -> list[nn.Parameter]:
        """What the policy optimizer updates: stems, actor head, log std."""
        skip = {id(p) for p in self.critic.parameters()}
        return [p for p in self.parameters() if id(p) not in skip]

    def critic_parameters(self) -> list[nn.Parameter]:
        """What the baseline optimizer updates: stems and critic head."""
        skip = {id(p) for p in self.actor.parameters()}
        if self.log_std is not None:
            skip.add(id(self.log_std))
        return [p for p in self.parameters() if id(p) not in skip]

    def actor_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights an agent needs to act (everything but the critic head)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("critic.")}


class DDPGActor(nn.Module):
    """Deterministic policy: observation -> action in [-1, 1] (tanh), rescaled by the agent."""

    def __init__(
        self, obs_shapes: ObsShapes, action_dim: int, hidden_sizes: Sequence[int], cnn: CNNConfig
    ) -> None:
        super().__init__()
        self.encoder = ObsEncoder(obs_shapes, cnn)
        self.net = mlp(self.encoder.out_dim, hidden_sizes, action_dim, nn.ReLU, out_gain=0.01)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """obs (N, ...) -> actions (N, action_dim) in [-1, 1]."""
        return torch.tanh(self.net(self.encoder(obs)))


class DDPGCritic(nn.Module):
    """Q(s, a): observation features concatenated with the action, through an MLP."""

    def __init__(
        self, obs_shapes: ObsShapes, action_dim: int, hidden_sizes: Sequence[int], cnn: CNNConfig
    ) -> None:
        super().__init__()
        self.encoder = ObsEncoder(obs_shapes, cnn)
        self.net = mlp(self.encoder.out_dim + action_dim, hidden_sizes, 1, nn.ReLU)

    def forward(self, obs: Mapping[str, torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        """Q values, shape (N,)."""
        out: torch.Tensor = self.net(torch.cat([self.encoder(obs), action], dim=-1)).squeeze(-1)
        return out


class NumpyMLP:
    """A frozen numpy copy of an `mlp(...)` for fast single-observation inference on the CPU.

    An agent acts on one observation at a time; for a 64-64 MLP, torch's per-call dispatch costs
    several times more than the arithmetic, and numpy does the same three matmuls in a few
    microseconds. The copy is refreshed whenever new parameters are loaded.
    """

    def __init__(self, net: nn.Sequential) -> None:
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []
        self.activations: list[str | None] = []
        modules = list(net)
        for i, module in enumerate(modules):
            if isinstance(module, nn.Linear):
                w = module.weight.detach().cpu().numpy().T.astype(np.float32).copy()
                b = module.bias.detach().cpu().numpy().astype(np.float32).copy()
                self.layers.append((w, b))
                nxt = modules[i + 1] if i + 1 < len(modules) else None
                if isinstance(nxt, nn.Tanh):
                    self.activations.append("tanh")
                elif isinstance(nxt, nn.ReLU):
                    self.activations.append("relu")
                elif nxt is None:
                    self.activations.append(None)
                else:
                    raise TypeError(f"unsupported layer after Linear: {nxt}")
            elif not isinstance(module, nn.Tanh | nn.ReLU):
                raise TypeError(f"unsupported layer {module}")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Forward pass on float32 inputs (any leading shape)."""
        for (w, b), act in zip(self.layers, self.activations, strict=True):
            x = x @ w + b
            if act == "tanh":
                x = np.tanh(x)
            elif act == "relu":
                x = np.maximum(x, 0.0)
        return x
