"""--sample_ahead: whether PPO's rollout workers sample the next fragment while the learner works.

Sampling ahead pays where the envs are slow and the CPU is free while they step (a remote
simulator, a game server): the envs no longer wait while gradients travel, and a round takes
about max(sampling, learning) instead of their sum. Where the envs are cheap and CPU-bound
(CartPole steps in ~7 us), the sampler thread only competes with the gradient calls of its own
process for the CPU and the GIL, and the data are one round of updates older for nothing. So
'auto' does not guess: once every remote worker is up it runs a few rounds without, a few with,
compares env steps per second, and keeps sampling ahead only when it was faster by a margin.
"""
import sys
import time


class SampleAhead:
    def __init__(self, mode, quiet=False, min_rounds=4, min_seconds=2.0, margin=1.10):
        """``mode``: 'on', 'off' or 'auto'. In 'auto', each trial phase lasts at least
        ``min_rounds`` rounds and ``min_seconds`` (its first round, a transition, not counted);
        sampling ahead is kept when it made ``margin`` times the env steps/s of plain sampling."""
        self.mode = mode
        self.quiet = quiet
        self.min_rounds, self.min_seconds, self.margin = min_rounds, min_seconds, margin
        self.phase = {"on": "on", "off": "off"}.get(mode, "trial-off")
        self.rounds, self.steps, self.seconds = 0, 0, 0.0
        self.rates = {}
        self.last_round_start = None

    def active(self):
        """Sample ahead in the coming round?"""
        return self.phase in ("on", "trial-on")

    def decided(self):
        return self.phase in ("on", "off")

    def record(self, env_steps, eligible, now=None):
        """After a round that delivered ``env_steps``. ``eligible``: every worker of the run is
        a remote one that is up (the in-process stand-in, a missing worker or a replacement
        still starting would blur the comparison: such rounds count for neither phase)."""
        now = time.perf_counter() if now is None else now
        last, self.last_round_start = self.last_round_start, now
        if self.decided() or last is None:
            return
        if not eligible:
            self.rounds, self.steps, self.seconds = 0, 0, 0.0
            return
        self.rounds += 1
        if self.rounds == 1:  # the phase's first round: the switch, not the steady state
            return
        self.steps += env_steps
        self.seconds += now - last
        if self.rounds - 1 >= self.min_rounds and self.seconds >= self.min_seconds:
            self.rates[self.phase] = self.steps / self.seconds
            self.rounds, self.steps, self.seconds = 0, 0, 0.0
            if self.phase == "trial-off":
                self.phase = "trial-on"
            else:
                self.decide()

    def decide(self):
        plain, ahead = self.rates["trial-off"], self.rates["trial-on"]
        self.phase = "on" if ahead >= self.margin * plain else "off"
        if not self.quiet:
            print(f"ddrl: --sample_ahead auto: {ahead:,.0f} env steps/s sampling ahead against "
                  f"{plain:,.0f} without: {self.phase}", file=sys.stderr, flush=True)

    def summary(self):
        """What was measured, for summary.json (None when nothing was)."""
        if not self.rates:
            return None
        return {"mode": self.mode, "on": self.active() if self.decided() else None,
                **{f"{k.split('-')[1]}_steps_per_s": round(v, 1) for k, v in self.rates.items()}}
