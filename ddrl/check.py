"""``ddrl check``: an env plugin tried against the contract ddrl relies on, before any run.

    ddrl check --env_name my_env [--user_dir DIR] [the env's flags]
    ddrl check --gym_id LunarLander-v3 --steps 500

It builds the env as a run would (core/plugins.py ``make_env``), resets it twice with one seed
and takes ``--steps`` random valid actions (an action mask obeyed), and names every problem it
finds, each with the plugin, the method and what came back:

- construction: a batch the plugin does not declare (a gymnasium VectorEnv as a plain plugin);
- reset: a (observation, info dict) pair; the same seed gives the same first observation;
- step: gymnasium's 5-tuple (observation, reward, terminated, truncated, info), a finite real
  reward, bool-like flags, an info dict;
- every observation: inside ``observation_space`` (shape, dtype, bounds) and finite;
- and gymnasium's own ``env_checker`` where the env is a gymnasium.Env.

Exit 0 when the env passes, 2 with the list of problems otherwise. ``ddrl.check_env(**flags)``
returns the same list (empty: it passes). A run makes the cheap part of these checks on its own
(``check_at_start``): its probe env (the one the driver builds to learn the spaces) gets a seeded
reset and a few random valid steps before anything else starts, and what would break the run
(a 4-tuple, a reset without info, an observation of the wrong shape or structure, NaN or inf, a
reward that is no finite number, an info that is no dict) stops it there with one paragraph,
exit 2; an observation of another dtype or out of its bounds, which training survives, gets a
warning line. On the hot path the old 4-tuple and NaN observations stop it too
(core/sampling/envs.py).
"""
import re
import warnings

import numpy as np


def check_env(argv=None, steps=None, **flags):
    """The problems (strings) of the env that ``argv`` (command-line flags) or ``flags``
    (``ddrl.train``'s keyword form) name; [] when it passes."""
    from options.keywords import argv_for
    from options.options import parse_args, run_spec
    argv = list(argv) if argv is not None else argv_for(flags)
    args = parse_args(argv)
    spec = run_spec(args)
    return EnvCheck(spec, args.env_name, steps or 100).run()


#: random steps the start of a run takes on its probe env (check_at_start)
START_STEPS = 8


def check_at_start(env, name, steps=START_STEPS):
    """The start of a run's check on ``env`` (built, not yet reset): one seeded reset and
    ``steps`` random valid steps. Returns (problems that would break the run, warnings): an
    observation's dtype or bounds are warnings here (training casts and survives them), where
    ``ddrl check`` calls them problems. An exception from reset or step ends the check without
    a finding: raising is the run's fault handling's to judge (a flaky simulator is survived,
    --max_env_errors), and this probe env is not a worker's (a self-play game raises here, as
    no policy is bound to it)."""
    check = EnvCheck(None, name, steps, lenient=True)
    if check.check_spaces(env):
        check.check_episodes(env, determinism=False)
    prefix = len(f"env plugin {name}: ")
    return [p[prefix:] for p in check.problems], [w[prefix:] for w in check.warnings]


class EnvCheck:
    def __init__(self, spec, name, steps, lenient=False):
        self.spec, self.name, self.steps = spec, name, steps
        # the start of a run's check: dtype and bounds are warnings, and an exception from
        # reset or step ends the check without a finding (check_at_start)
        self.lenient = lenient
        self.problems, self.warnings = [], []
        self.kinds = set()  # each kind of problem named once, at its first step

    def problem(self, text, warning=False):
        kind = re.sub(r" at step \d+", "", text)
        if kind not in self.kinds:
            self.kinds.add(kind)
            (self.warnings if warning else self.problems).append(f"env plugin {self.name}: {text}")

    def run(self):
        from core.errors import ConfigError
        from core.plugins import load_plugins, make_env
        plugins = load_plugins(self.spec)
        try:
            env = make_env(plugins, self.spec.env, seed=0)
        except ConfigError as exc:
            self.problem(str(exc))
            return self.problems
        except Exception as exc:  # noqa: BLE001 - reported as the problem it is
            self.problem(f"__init__ raised {type(exc).__name__}: {exc}")
            return self.problems
        try:
            self.check_spaces(env) and self.check_episodes(env)
            self.gymnasium_checker(plugins)
        finally:
            getattr(env, "close", lambda: None)()
        return self.problems

    # -- the parts -------------------------------------------------------------------------------
    def check_spaces(self, env):
        from gymnasium import spaces
        ok = True
        for attribute in ("observation_space", "action_space"):
            space = getattr(env, attribute, None)
            if not isinstance(space, spaces.Space):
                self.problem(f"{attribute} is {type(space).__name__}, not a gymnasium Space")
                ok = False
        return ok

    def reset(self, env, seed):
        try:
            result = env.reset(seed=seed)
        except Exception as exc:  # noqa: BLE001
            if not self.lenient:
                self.problem(f"reset(seed={seed}) raised {type(exc).__name__}: {exc}")
            return None
        if not (isinstance(result, tuple) and len(result) == 2
                and isinstance(result[1], dict)):
            self.problem(f"reset() returned {describe(result)}; gymnasium's is a pair "
                         f"(observation, info dict)")
            return None
        self.check_observation(env, result[0], "reset()")
        return result[0]

    def check_observation(self, env, obs, where):
        space = env.observation_space
        for leaf, value in leaves(obs):
            array = np.asarray(value)
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                self.problem(f"{where} returned an observation{leaf} holding NaN or inf")
                return
        try:
            inside = space.contains(obs)
        except Exception:  # noqa: BLE001 - a structure the space cannot even read
            inside = False
        if not inside:
            found = describe_observation(obs, space)
            text = f"{where} returned an observation outside observation_space {space}: {found}"
            if found.startswith("entries "):  # which entries differs from step to step
                text = text[:text.rindex(": ")] + ": entries out of bounds"
            self.problem(text, warning=self.lenient and found.startswith(("dtype ", "entries ")))

    def check_episodes(self, env, determinism=True):
        first = self.reset(env, seed=123)
        if first is None:
            return False
        again = self.reset(env, seed=123) if determinism else first
        if again is None:
            return False
        if determinism and not same(first, again):
            self.problem("reset(seed=123) twice gave different first observations: the seed "
                         "does not reach the env's randomness (ddrl seeds every env's reset, "
                         "so runs repeat)")
        rng = np.random.default_rng(0)
        env.action_space.seed(int(rng.integers(1 << 31)))
        obs, episodes = again, 0
        for t in range(self.steps):
            action = sample_action(env.action_space, obs)
            try:
                result = env.step(action)
            except Exception as exc:  # noqa: BLE001
                if not self.lenient:
                    self.problem(f"step() raised {type(exc).__name__} at step {t}: {exc}")
                return False
            if not (isinstance(result, tuple) and len(result) == 5):
                extra = (" (the old gym API's (observation, reward, done, info): split done "
                         "into terminated and truncated)"
                         if isinstance(result, tuple) and len(result) == 4 else "")
                self.problem(f"step() returned {describe(result)}; gymnasium's is the 5-tuple "
                             f"(observation, reward, terminated, truncated, info){extra}")
                return False
            obs, reward, terminated, truncated, info = result
            self.check_observation(env, obs, f"step() at step {t}")
            if not finite_real(reward):
                self.problem(f"step() at step {t} returned the reward {reward!r}; a finite "
                             f"real number is expected")
            for flag, value in (("terminated", terminated), ("truncated", truncated)):
                if not isinstance(value, (bool, np.bool_)):
                    self.problem(f"step() returned {flag} as {type(value).__name__} "
                                 f"({value!r}); a bool is expected")
            if not isinstance(info, dict):
                self.problem(f"step() returned info as {type(info).__name__}; a dict is "
                             f"expected")
            if len(self.problems) > 10:
                return False
            if terminated or truncated:
                episodes += 1
                obs = self.reset(env, seed=None)
                if obs is None:
                    return False
        return True

    def gymnasium_checker(self, plugins):
        """gymnasium's env_checker on a fresh env, when the env is a gymnasium.Env."""
        import gymnasium as gym
        from gymnasium.utils.env_checker import check_env as gymnasium_check
        from core.plugins import make_env
        env = make_env(plugins, self.spec.env, seed=0)
        inner = env
        while not isinstance(inner, gym.Env) and hasattr(inner, "env"):
            inner = inner.env
        try:
            if isinstance(inner, gym.Env):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gymnasium_check(inner, skip_render_check=True)
        except Exception as exc:  # noqa: BLE001 - its finding, reported
            self.problem(f"gymnasium's env_checker: {type(exc).__name__}: {exc}")
        finally:
            getattr(env, "close", lambda: None)()


# -- helpers ---------------------------------------------------------------------------------------
def leaves(obs, prefix=""):
    if isinstance(obs, dict):
        for key, value in obs.items():
            yield from leaves(value, f"{prefix}/{key}")
    elif isinstance(obs, tuple):
        for i, value in enumerate(obs):
            yield from leaves(value, f"{prefix}/{i}")
    else:
        yield (f" (leaf {prefix[1:]!r})" if prefix else ""), obs


def finite_real(value):
    """A finite real scalar (a Python or numpy number; a bool is no reward)."""
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
        return False
    try:
        return bool(np.isfinite(float(value)))
    except (TypeError, ValueError):
        return False


def same(a, b):
    pairs = list(zip(leaves(a), leaves(b)))
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for (_, x), (_, y) in pairs)


def describe(result):
    if isinstance(result, tuple):
        return f"a {len(result)}-tuple ({', '.join(type(x).__name__ for x in result)})"
    return f"a {type(result).__name__}"


def describe_observation(obs, space):
    array = np.asarray(obs) if not isinstance(obs, (dict, tuple)) else None
    shape = getattr(space, "shape", None)
    if array is not None and shape is not None and array.shape != tuple(shape):
        return f"shape {array.shape}, the space's {tuple(shape)}"
    dtype = getattr(space, "dtype", None)
    if array is not None and dtype is not None and array.dtype != dtype:
        return f"dtype {array.dtype}, the space's {dtype}"
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if array is not None and low is not None:
        below = np.flatnonzero(np.ravel(array < low))
        above = np.flatnonzero(np.ravel(array > high))
        if len(below) or len(above):
            return f"entries {sorted({*below.tolist(), *above.tolist()})[:5]} out of bounds"
    return f"{type(obs).__name__} {obs!r}"[:200]


def sample_action(space, obs):
    """A random action, obeying an action mask in a Dict observation."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    if mask is not None:
        try:
            return space.sample(mask=np.asarray(mask, dtype=np.int8))
        except Exception:  # noqa: BLE001 - a mask the space's sampler does not take
            pass
    return space.sample()


def main(argv):
    """``ddrl check FLAGS``: the exit code (0: it passes; 2: the problems, one per line)."""
    from core.errors import ConfigError
    steps = 100
    if "--steps" in argv:
        at = argv.index("--steps")
        try:
            steps = int(argv[at + 1])
        except (IndexError, ValueError):
            raise ConfigError("--steps takes a positive number of env steps to try") from None
        argv = argv[:at] + argv[at + 2:]
    problems = check_env(argv, steps=steps)
    if problems:
        raise ConfigError(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} with "
                          f"the env:\n  - " + "\n  - ".join(problems))
    print(f"ddrl check: the env passes ({steps} steps, two seeded resets, gymnasium's checker "
          f"where it applies)")
    return 0
