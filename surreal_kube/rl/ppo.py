"""PPO's learner (clipped or adaptive-KL surrogate); its actors are in `ppo_actor.py`.

The learner consumes batches of sub-trajectories (see `trajectory.py`): it whitens observations
with its ZFilter (whose statistics it publishes with the weights), computes values and GAE over each
window, then runs `epochs_policy` policy epochs and `epochs_baseline` critic epochs. The critic
learns its targets scaled by their running statistics (`value_norm`, PopArt) unless
`value_norm` is off.

Two policies, two roles:
- The *behaviour* policy produced the data (its log-probabilities travel with every step,
  `behaviour_logp`). The surrogate's probability ratio is taken against it, so data that is a few
  learner iterations old (agents act with the parameters they last fetched; see the policy-lag
  bound in `PPOConfig.max_policy_lag`) is still corrected exactly.
- The *reference* policy, for every KL figure, is the policy at the start of the iteration: the
  KL of an iteration is the mean, over the batch's owned steps, of KL(policy at the iteration's
  start || policy after it). Early stopping (`early_stop_kl`) compares it with `kl_target` after
  each policy epoch; the adaptive-KL penalty uses it; and at the end of every iteration the clip
  range (clip mode) or the penalty coefficient (adapt mode) adapts to it. `losses/approx_kl` is this
  per-iteration figure; `ppo/kl_behaviour` is the mean KL(behaviour || policy after the
  iteration), which grows with policy lag.

The ZFilter (and the reward filter) whitens a batch with the statistics the agents acted with,
and takes the batch's owned steps into its running statistics only after the update, as the
original system did: updating first would shift every observation the behaviour
log-probabilities were computed on, so the first epoch's ratio would no longer start at one.

The learner alone: the acting side (the policy an agent process loads once per fetch, the actors,
the version each step acted with) is `ppo_actor.py`; the losses (losses.py), GAE (gae.py), the
critic's normalization (value_norm.py) and the optimizer (optim.py) are apart.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from surreal_kube.experiment.algorithms import PPOConfig
from surreal_kube.rl import losses
from surreal_kube.rl.filters import FilterHistory, RewardFilter
from surreal_kube.rl.gae import gae, normalize_advantages
from surreal_kube.rl.interfaces import ArrayDict
from surreal_kube.rl.models import PPOModel
from surreal_kube.rl.observations import unflatten_obs
from surreal_kube.rl.optim import adam
from surreal_kube.rl.params import state_to_arrays
from surreal_kube.rl.ppo_actor import build_model, make_distribution, z_filter_for
from surreal_kube.rl.schedules import schedule_from_config, scheduled_value
from surreal_kube.rl.seeding import set_torch_rng_state, torch_rng_state
from surreal_kube.rl.value_norm import ValueNormalizer


def _step_versions(
    batch: ArrayDict, mask: np.ndarray, lengths: np.ndarray, current: int
) -> np.ndarray:
    """(B, H+1) parameter version of every observation of `_prepare`'s sequence.

    Per step when the items carry `step_version`, else the item's `param_version`, else (batches
    not from actors) the learner's current version. The bootstrap observation at `lengths` takes
    its window's last step's version.
    """
    b, h = mask.shape
    if "step_version" in batch:
        steps = np.asarray(batch["step_version"], dtype=np.int64).reshape(b, h)
    elif "param_version" in batch:
        steps = np.repeat(np.asarray(batch["param_version"], dtype=np.int64).reshape(b, 1), h, 1)
    else:
        steps = np.full((b, h), current, dtype=np.int64)
    rows = np.arange(b)
    ext = np.concatenate([steps, steps[:, -1:]], axis=1)
    ext[rows, lengths] = steps[rows, np.maximum(lengths - 1, 0)]
    return ext


class PPOLearner:
    """The PPO update on batches of sub-trajectories; see module docstring."""

    def __init__(
        self,
        config: PPOConfig,
        obs_space: gym.Space[Any],
        action_space: gym.Space[Any],
        device: torch.device | str = "cpu",
        seed: int | None = None,
    ) -> None:
        if seed is not None:
            torch.manual_seed(seed)
        self.config = config
        self.device = torch.device(device)
        self.dist = make_distribution(action_space)
        self.model = build_model(config, obs_space, action_space).to(self.device)
        self._actor_params = self.model.actor_parameters()
        self._critic_params = self.model.critic_parameters()
        self.opt_policy = adam(self._actor_params, config.lr_policy)
        self.opt_baseline = adam(self._critic_params, config.lr_baseline)
        # Actor and critic share no parameters unless a stem (CNN, LSTM) sits under both: then
        # the two updates can be fused over individual steps (see _epochs_flat).
        self._flat = self.model.rnn is None and self.model.encoder.cnn is None
        self.lr_scale = schedule_from_config(config.lr_schedule, 1.0)
        self.clip_scale = schedule_from_config(config.clip_schedule, 1.0)
        self.budget_fraction: float | None = None
        """The run's budget spent (0-1), set by whoever drives the learner (see RunBudget)."""
        self.budget_seconds = 0.0
        """Wall time the run had spent at the last update (kept in checkpoints)."""
        self.z_filter = z_filter_for(config, obs_space)
        # the filters of the versions data may still come from (up to max_policy_lag old)
        self.filter_history = FilterHistory(config.max_policy_lag + 2)
        if self.z_filter is not None:
            self.filter_history.record(0, self.z_filter)
        self.filter_misses = 0
        """Steps whitened with the current filter because their version's was not kept."""
        self.r_filter = RewardFilter() if config.use_r_filter else None
        self.value_norm = ValueNormalizer(self._critic_head()) if config.value_norm else None
        self.clip_epsilon = config.clip_epsilon
        self._clip_now = config.clip_epsilon  # the adapted clip range, scaled by its schedule
        self.beta = config.beta_init
        self.iteration = 0
        self.env_steps = 0
        self.last_kl = 0.0

    # -- parameters ------------------------------------------------------------------------------

    def parameters(self) -> ArrayDict:
        """Policy weights (`model/...`), ZFilter statistics (`z_filter/...`), `meta/iteration`."""
        params = state_to_arrays(self.model.actor_state_dict(), "model")
        if self.z_filter is not None:
            params.update(self.z_filter.to_arrays("z_filter"))
        params["meta/iteration"] = np.array([self.iteration], dtype=np.int64)
        return params

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume: weights, optimizers, filters and adaptive coefficients."""
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "opt_policy": self.opt_policy.state_dict(),
            "opt_baseline": self.opt_baseline.state_dict(),
            "clip_epsilon": self.clip_epsilon,
            "beta": self.beta,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "last_kl": self.last_kl,
            "budget_seconds": self.budget_seconds,
            "rng": torch_rng_state(self.device),
        }
        if self.z_filter is not None:
            history = self.filter_history.to_arrays("z_filter_history")
            state["z_filter_history"] = {k: torch.from_numpy(v) for k, v in history.items()}
        for name, filt in (("z_filter", self.z_filter), ("r_filter", self.r_filter)):
            if filt is not None:
                state[name] = {k: torch.from_numpy(v) for k, v in filt.to_arrays(name).items()}
        if self.value_norm is not None:
            state["value_norm"] = self.value_norm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict` output (older checkpoints' `ref_model` is ignored)."""
        self.model.load_state_dict(state["model"])
        self.opt_policy.load_state_dict(state["opt_policy"])
        self.opt_baseline.load_state_dict(state["opt_baseline"])
        for key in ("clip_epsilon", "beta", "last_kl"):
            setattr(self, key, float(state[key]))
        for key in ("iteration", "env_steps"):
            setattr(self, key, int(state[key]))
        set_torch_rng_state(state.get("rng"), self.device)
        for name, filt in (("z_filter", self.z_filter), ("r_filter", self.r_filter)):
            if filt is not None and name in state:
                filt.load_arrays(state[name], name)
        self.budget_seconds = float(state.get("budget_seconds", 0.0))
        if self.z_filter is not None:
            self.filter_history = FilterHistory(self.config.max_policy_lag + 2)
            if "z_filter_history" in state:
                self.filter_history.load_arrays(state["z_filter_history"], "z_filter_history")
            self.filter_history.record(self.iteration, self.z_filter)
        # A checkpoint from before value normalization holds a head in return units: with the
        # normalizer's initial statistics (mean 0, std 1) that is read the same way.
        if self.value_norm is not None and "value_norm" in state:
            self.value_norm.load_state_dict(state["value_norm"])

    # -- learning --------------------------------------------------------------------------------

    def _tensor(self, x: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device, dtype=dtype)

    def _prepare(self, batch: ArrayDict) -> dict[str, Any]:
        """Filters, the observation sequence with the bootstrap obs spliced in, masks, actions."""
        mask = batch["mask"].astype(np.float32)
        train_mask = batch["train_mask"].astype(np.float32)
        b, h = mask.shape
        lengths = mask.sum(axis=1).astype(np.int64)
        obs = unflatten_obs("obs", batch)
        boot = unflatten_obs("bootstrap", batch)
        seq = {}
        for key, value in obs.items():
            # (B, H+1, ...): the valid prefix, then the bootstrap observation right after it, so an
            # LSTM reaches it with the right hidden state; positions after that are padding.
            ext = np.concatenate([value, np.zeros_like(value[:, :1])], axis=1)
            ext[np.arange(b), lengths] = boot[key]
            seq[key] = ext
        owned_obs = None
        if self.z_filter is not None and "low_dim" in seq:
            # whiten each step with the statistics its agent acted with (its version's filter);
            # the current filter takes the batch in after learning (see the module docstring)
            owned_obs = obs["low_dim"][train_mask > 0]
            versions = _step_versions(batch, mask, lengths, self.iteration)
            seq["low_dim"], missed = self.filter_history.whiten(
                seq["low_dim"], versions, self.z_filter
            )
            self.filter_misses += missed
        raw_rewards = batch["rewards"].astype(np.float32)
        rewards = raw_rewards
        if self.r_filter is not None:
            rewards = self.r_filter.normalize(raw_rewards)
        state = None
        if "rnn_h" in batch:
            # Items store (layers, hidden); the LSTM wants (layers, B, hidden).
            state = (
                self._tensor(np.ascontiguousarray(batch["rnn_h"].transpose(1, 0, 2))),
                self._tensor(np.ascontiguousarray(batch["rnn_c"].transpose(1, 0, 2))),
            )
        return {
            "seq": {k: self._tensor(v) for k, v in seq.items()},
            "state": state,
            "mask": mask,
            "train_mask": train_mask,
            "lengths": lengths,
            "rewards": rewards,
            "terminals": batch["terminals"].astype(np.float32),
            "actions": self._tensor(batch["actions"]),
            "behaviour_logp": self._tensor(batch["behaviour_logp"], torch.float32),
            "behaviour_info": self._tensor(batch["action_info"], torch.float32),
            "b": b,
            "h": h,
            "owned_obs": owned_obs,
            "owned_rewards": raw_rewards[train_mask > 0],
        }

    @staticmethod
    def _select(seq: dict[str, torch.Tensor], idx: torch.Tensor | slice) -> dict[str, torch.Tensor]:
        return {k: v[idx] for k, v in seq.items()}

    def _forward(
        self, model: PPOModel, data: dict[str, Any], idx: torch.Tensor | slice
    ) -> torch.Tensor:
        state = data["state"]
        if state is not None:
            state = (state[0][:, idx], state[1][:, idx])
        features, _ = model.features(self._select(data["seq"], idx), state)
        return features

    def learn(self, batch: ArrayDict) -> dict[str, float]:
        """One iteration: GAE, policy epochs (with KL early stop), baseline epochs, adaptation."""
        cfg = self.config
        spent = self.budget_fraction
        scale = scheduled_value(cfg.lr_schedule, self.lr_scale, self.iteration, spent)
        clip_scale = scheduled_value(cfg.clip_schedule, self.clip_scale, self.iteration, spent)
        self._clip_now = self.clip_epsilon * clip_scale
        for group in self.opt_policy.param_groups:
            group["lr"] = cfg.lr_policy * scale
        for group in self.opt_baseline.param_groups:
            group["lr"] = cfg.lr_baseline * scale
        data = self._prepare(batch)
        b, h = data["b"], data["h"]
        everything = slice(None)
        rows = torch.arange(b, device=self.device)
        lengths = torch.as_tensor(data["lengths"], device=self.device)

        with torch.no_grad():
            features = self._forward(self.model, data, everything)
            values_ext = self._values(features)
            boot_values = values_ext[rows, lengths].cpu().numpy()
            values = values_ext[:, :h].cpu().numpy() * data["mask"]
            # the reference of every KL figure and the clip's centre: the policy at the start
            # of this iteration
            ref_info = self.model.policy_info(features)[:, :h]
            data["ref_logp"] = self.dist.log_prob(ref_info, data["actions"])
            # pi_start / pi_behaviour: 1 on-policy; what corrects a lagged step (truncated)
            raw_weights = torch.exp(data["ref_logp"] - data["behaviour_logp"])
            data["weights"] = raw_weights.clamp(max=cfg.behaviour_weight_max)
        adv, returns = gae(
            data["rewards"],
            values,
            boot_values,
            data["terminals"],
            cfg.gamma,
            cfg.lam,
            data["mask"],
        )
        train_mask_np = data["train_mask"]
        if cfg.norm_advantage:
            adv = normalize_advantages(adv, train_mask_np)
        adv_t = self._tensor(adv)
        train_mask = self._tensor(train_mask_np)
        explained = losses.explained_variance(
            self._tensor(values), self._tensor(returns), train_mask
        )
        # the critic learns its targets in its own units (see value_norm)
        targets = returns
        if self.value_norm is not None:
            self.value_norm.update(returns[train_mask_np > 0])
            targets = self.value_norm.normalize(returns)
        returns_t = self._tensor(targets)

        if self._flat:
            epochs_run, _, grad_norm, policy_stats, vloss = self._epochs_flat(
                data, ref_info, adv_t, returns_t, train_mask
            )
        else:
            epochs_run, _, grad_norm, policy_stats, vloss = self._epochs_sequences(
                data, ref_info, adv_t, returns_t, train_mask
            )
        # Measured once more after both kinds of epochs: with a shared stem (CNN, LSTM) the critic
        # epochs move the policy too, after the early-stop check, and that movement counts.
        kl, kl_behaviour = self._iteration_kl(data, ref_info, train_mask)

        steps = int(train_mask_np.sum())
        self.iteration += 1
        self.env_steps += steps
        self.last_kl = kl
        self._adapt(kl)
        if self.z_filter is not None and data["owned_obs"] is not None:
            self.z_filter.update(data["owned_obs"])
        if self.z_filter is not None:
            self.filter_history.record(self.iteration, self.z_filter)
        if self.r_filter is not None:
            self.r_filter.update(data["owned_rewards"])
        owned_t = train_mask > 0
        weights_owned = raw_weights[owned_t]

        stats = {f"losses/{k}": float(v) for k, v in policy_stats.items()}
        stats.update(
            {
                "losses/policy_loss": float(policy_stats.get("loss", float("nan"))),
                "losses/value_loss": float(vloss),
                "losses/approx_kl": kl,
                "ppo/kl_behaviour": kl_behaviour,
                "losses/explained_variance": explained,
                "ppo/clip_epsilon": self._clip_now,
                "ppo/behaviour_weight_mean": float(weights_owned.mean()),
                "ppo/behaviour_weight_truncated": float(
                    (weights_owned > cfg.behaviour_weight_max).float().mean()
                ),
                "ppo/filter_misses": float(self.filter_misses),
                "ppo/beta": self.beta,
                "ppo/policy_epochs": float(epochs_run),
                "ppo/lr_policy": cfg.lr_policy * scale,
                "ppo/budget_fraction": -1.0 if spent is None else spent,
                "ppo/grad_norm": grad_norm,
                "ppo/advantage_mean_raw": float(np.mean(adv[train_mask_np > 0])),
                "ppo/return_mean": float(returns[train_mask_np > 0].mean()),
                "ppo/value_scale": 1.0 if self.value_norm is None else self.value_norm.std,
                "learner/iteration": float(self.iteration),
                "learner/env_steps": float(self.env_steps),
                "learner/batch_steps": float(steps),
            }
        )
        stats.pop("losses/loss", None)
        return stats

    def _policy_loss(
        self,
        info: torch.Tensor,
        actions: torch.Tensor,
        ref_logp: torch.Tensor,
        weights: torch.Tensor,
        adv: torch.Tensor,
        ref_info: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Decoupled surrogate (clip or adaptive KL) minus the entropy bonus, with its stats.

        The ratio is taken against the policy at the iteration's start (the one trust-region
        centre, shared with the KL figures, early stopping and the clip's adaptation); each
        step's `weights` (pi_start / pi_behaviour, truncated) correct for the policy that acted.
        """
        cfg = self.config
        logp = self.dist.log_prob(info, actions)
        if cfg.mode == "clip":
            loss, stats = losses.ppo_clip_loss(
                logp, ref_logp, adv, self._clip_now, mask, weights=weights
            )
        else:
            kl_ref = self.dist.kl(ref_info, info)
            loss, stats = losses.ppo_adapt_loss(
                logp,
                ref_logp,
                adv,
                kl_ref,
                self.beta,
                cfg.kl_target,
                cfg.kl_cutoff_coeff,
                mask,
                weights=weights,
            )
        entropy = losses.masked_mean(self.dist.entropy(info), mask)
        loss = loss - cfg.entropy_coeff * entropy
        stats["loss"] = loss.detach()
        stats["entropy"] = entropy.detach()
        return loss, stats

    def _stop_early(self, kl: float) -> bool:
        cfg = self.config
        return cfg.early_stop_kl is not None and kl > cfg.early_stop_kl * cfg.kl_target

    def _epochs_sequences(
        self,
        data: dict[str, Any],
        ref_info: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        train_mask: torch.Tensor,
    ) -> tuple[int, float, float, dict[str, torch.Tensor], torch.Tensor]:
        """Policy epochs, then baseline epochs, over minibatches of whole sub-trajectories.

        Used when the stems (LSTM, CNN) are shared by actor and critic, or with an LSTM that
        must run over each sub-trajectory in order.
        """
        cfg = self.config
        b, h = data["b"], data["h"]
        minibatches = min(cfg.minibatches, b)
        stats: dict[str, torch.Tensor] = {}
        epochs_run, kl, grad_norm = 0, float("nan"), 0.0
        for _ in range(cfg.epochs_policy):
            for idx in torch.randperm(b, device=self.device).chunk(minibatches):
                info = self.model.policy_info(self._forward(self.model, data, idx)[:, :h])
                loss, stats = self._policy_loss(
                    info,
                    data["actions"][idx],
                    data["ref_logp"][idx],
                    data["weights"][idx],
                    adv[idx],
                    ref_info[idx],
                    train_mask[idx],
                )
                self.opt_policy.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = self._clip(self._actor_params)
                self.opt_policy.step()
            epochs_run += 1
            if cfg.early_stop_kl is not None or epochs_run == cfg.epochs_policy:
                kl = self._kl_to_ref(data, ref_info, train_mask)
                if self._stop_early(kl):
                    break
        vloss = torch.tensor(float("nan"))
        for _ in range(cfg.epochs_baseline):
            for idx in torch.randperm(b, device=self.device).chunk(minibatches):
                v = self.model.value(self._forward(self.model, data, idx)[:, :h])
                vloss = losses.value_loss(v, returns[idx], train_mask[idx])
                self.opt_baseline.zero_grad(set_to_none=True)
                vloss.backward()
                self._clip(self._critic_params)
                self.opt_baseline.step()
        return epochs_run, kl, grad_norm, stats, vloss.detach()

    def _epochs_flat(
        self,
        data: dict[str, Any],
        ref_info: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        train_mask: torch.Tensor,
    ) -> tuple[int, float, float, dict[str, torch.Tensor], torch.Tensor]:
        """Policy and baseline epochs over minibatches of individual (owned) steps, fused.

        Without a shared stem the actor and the critic have disjoint parameters and optimizers,
        and advantages and returns are fixed for the iteration, so a policy epoch and a baseline
        epoch do not influence each other: running them interleaved, with one backward pass for
        both losses, gives the same updates as running them one after the other, at half the
        per-step overhead. The policy stops early on KL; the baseline keeps its epochs.
        """
        cfg = self.config
        h = data["h"]
        owned = train_mask > 0
        obs = {k: v[:, :h][owned] for k, v in data["seq"].items()}
        actions = data["actions"][owned]
        ref_logp, weights = data["ref_logp"][owned], data["weights"][owned]
        adv, returns, ref_info = adv[owned], returns[owned], ref_info[owned]
        n = actions.shape[0]
        # Minibatches have the size they would have in a batch of full windows, so a batch that
        # holds fewer steps (short episodes end windows early) gets fewer gradient steps, not
        # smaller minibatches: the work per env step stays the same whatever the episode length.
        size = max(math.ceil(cfg.batch_size * cfg.stride / cfg.minibatches), 1)
        minibatches = max(math.ceil(n / size), 1)
        stats: dict[str, torch.Tensor] = {}
        epochs_run, kl, grad_norm = 0, float("nan"), 0.0
        vloss = torch.tensor(float("nan"))
        policy_on = True
        for epoch in range(max(cfg.epochs_policy, cfg.epochs_baseline)):
            do_policy = policy_on and epoch < cfg.epochs_policy
            do_value = epoch < cfg.epochs_baseline
            if not (do_policy or do_value):
                break
            for idx in torch.randperm(n, device=self.device).chunk(minibatches):
                mb = {k: v[idx] for k, v in obs.items()}
                features = self.model.encoder(mb)
                loss = torch.zeros((), device=self.device)
                if do_policy:
                    info = self.model.policy_info(features)
                    ploss, stats = self._policy_loss(
                        info,
                        actions[idx],
                        ref_logp[idx],
                        weights[idx],
                        adv[idx],
                        ref_info[idx],
                        None,
                    )
                    loss = loss + ploss
                if do_value:
                    vloss = losses.value_loss(self.model.value(features), returns[idx])
                    loss = loss + vloss
                self.opt_policy.zero_grad(set_to_none=True)
                self.opt_baseline.zero_grad(set_to_none=True)
                loss.backward()
                if do_policy:
                    grad_norm = self._clip(self._actor_params)
                    self.opt_policy.step()
                if do_value:
                    self._clip(self._critic_params)
                    self.opt_baseline.step()
            if do_policy:
                epochs_run += 1
                if cfg.early_stop_kl is not None or epochs_run == cfg.epochs_policy:
                    with torch.no_grad():
                        info = self.model.policy_info(self.model.encoder(obs))
                        kl = float(self.dist.kl(ref_info, info).mean())
                    policy_on = not self._stop_early(kl)
        return epochs_run, kl, grad_norm, stats, vloss.detach()

    def _critic_head(self) -> torch.nn.Linear:
        """The critic's last layer, which PopArt rescales when the value statistics move."""
        head = self.model.critic[-1]
        if not isinstance(head, torch.nn.Linear):
            raise TypeError(f"the critic must end in a Linear layer, not {type(head).__name__}")
        return head

    def _values(self, features: torch.Tensor) -> torch.Tensor:
        """V(s) in return units (the critic's head may work in normalized units)."""
        values = self.model.value(features)
        return values if self.value_norm is None else self.value_norm.denormalize(values)

    def _clip(self, params: list[torch.nn.Parameter]) -> float:
        if self.config.max_grad_norm is None:
            return 0.0
        return float(torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm))

    @torch.no_grad()
    def _kl_to_ref(
        self, data: dict[str, Any], ref_info: torch.Tensor, train_mask: torch.Tensor
    ) -> float:
        info = self.model.policy_info(self._forward(self.model, data, slice(None))[:, : data["h"]])
        return float(losses.masked_mean(self.dist.kl(ref_info, info), train_mask))

    @torch.no_grad()
    def _iteration_kl(
        self, data: dict[str, Any], ref_info: torch.Tensor, train_mask: torch.Tensor
    ) -> tuple[float, float]:
        """(KL from the iteration's start, KL from the behaviour policy), mean over owned steps."""
        info = self.model.policy_info(self._forward(self.model, data, slice(None))[:, : data["h"]])
        kl = float(losses.masked_mean(self.dist.kl(ref_info, info), train_mask))
        behaviour = data["behaviour_info"]
        kl_b = float(losses.masked_mean(self.dist.kl(behaviour, info), train_mask))
        return kl, kl_b

    def _adapt(self, kl: float) -> None:
        """Adapt the clip range (clip mode) or beta (adapt mode) to this iteration's KL."""
        cfg = self.config
        if np.isfinite(kl):
            if cfg.mode == "clip":
                self.clip_epsilon = losses.adapt_within(
                    self.clip_epsilon,
                    kl,
                    cfg.kl_target,
                    cfg.clip_adjust_threshold,
                    cfg.beta_adjust_factor,
                    cfg.clip_range,
                    grow_when_kl_high=False,
                )
            else:
                self.beta = losses.adapt_within(
                    self.beta,
                    kl,
                    cfg.kl_target,
                    cfg.clip_adjust_threshold,
                    cfg.beta_adjust_factor,
                    cfg.beta_range,
                    grow_when_kl_high=True,
                )
