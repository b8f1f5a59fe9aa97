"""core/distributed/devices.py: the GPU plan of both loops, the device a process resolves, the GPU checks,
and (in a Ray instance of its own with two fake GPUs) that SAC's actors reserve what the plan
says. The machines here have no GPU and a CPU-only torch: "cuda" is only ever faked."""
import json
import os
import subprocess
import sys

import pytest
import ray
import torch

from core.distributed import devices
from core.distributed.devices import (LEARNERS, ROLLOUT_WORKERS, check_cluster_gpus, check_local_gpus, gpu_share, plan_gpus,
                          resolve_device, to_cpu)
from core.errors import ConfigError
from options.options import parse_args

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- (a) the plan --------------------------------------------------------------------------------
@pytest.mark.parametrize("num_gpus, sharers, share", [
    (0, 3, 0.0), (1, 0, 0.0), (1, 1, 1.0), (4, 1, 1.0), (2, 2, 1.0), (1, 2, 0.5),
    (1, 3, 0.3333), (2, 3, 0.5), (2, 4, 0.5), (3, 4, 0.5), (2, 5, 0.3333), (3, 2, 1.0),
])
def test_each_actor_reserves_at_most_one_gpu_and_the_shares_pack_onto_whole_devices(
        num_gpus, sharers, share):
    assert gpu_share(num_gpus, sharers) == share
    if sharers:
        # k actors per device, every device full at most: nothing straddles two GPUs.
        per_device = round(1 / share) if share else 0
        assert sharers * share <= num_gpus + 1e-9
        assert share == 0 or per_device * num_gpus >= sharers


@pytest.mark.parametrize("num_gpus, learners, server, learner", [
    (0, 1, 0.0, 0.0), (1, 1, 1.0, 0.0), (2, 1, 1.0, 0.0),
    (1, 2, 0.0, 0.5), (2, 2, 0.0, 1.0), (2, 3, 0.0, 0.5), (0, 4, 0.0, 0.0),
])
def test_sac_gives_the_gpu_to_whoever_computes_the_gradients(num_gpus, learners, server, learner):
    plan = plan_gpus(LEARNERS, num_gpus, num_workers=2, num_learners=learners)
    assert (plan.parameter_server_gpus, plan.learner_worker_gpus) == (server, learner)
    assert plan.rollout_worker_gpus == plan.replay_buffer_gpus == plan.test_worker_gpus == 0
    assert plan.driver_learner_gpus == 0
    assert plan.reserved <= num_gpus


@pytest.mark.parametrize("num_gpus, workers, share", [
    (0, 2, 0.0), (1, 2, 0.5), (2, 2, 1.0), (1, 0, 1.0), (1, 3, 0.3333), (4, 2, 1.0),
])
def test_ppo_gives_the_gpu_to_the_rollout_workers_and_keeps_the_driver_learner_on_the_cpu(
        num_gpus, workers, share):
    plan = plan_gpus(ROLLOUT_WORKERS, num_gpus, num_workers=workers)
    assert plan.rollout_worker_gpus == share
    assert plan.driver_learner_gpus == plan.parameter_server_gpus == 0
    assert plan.learner_worker_gpus == plan.test_worker_gpus == 0
    assert plan.reserved <= num_gpus


def test_ppo_with_grad_workers_0_gives_the_gpu_to_the_drivers_learner():
    """--grad_workers 0: the learner computes every gradient in the driver, so it takes one
    device and the rollout workers none."""
    from core.algos.trainers import trainer_class
    plan = plan_gpus(devices.DRIVER_LEARNER, 2, num_workers=3)
    assert plan.driver_learner_gpus == 1.0 and plan.rollout_worker_gpus == 0
    assert plan.parameter_server_gpus == plan.learner_worker_gpus == 0
    args = parse_args(["--config", "none", "--num_gpus", "1", "--num_workers", "3",
                       "--grad_workers", "0"])
    ppo = trainer_class("ppo").gpu_plan(args)
    assert ppo.driver_learner_gpus == 1.0 and ppo.rollout_worker_gpus == 0
    args.grad_workers = "auto"
    assert trainer_class("ppo").gpu_plan(args).rollout_worker_gpus == 0.3333


def test_the_loop_declares_who_computes_and_a_plugin_loop_gets_the_rollout_workers_plan():
    from core.algos.trainer import Trainer
    from core.algos.trainers import trainer_class
    args = parse_args(["--config", "none", "--model_name", "sac", "--gym_id", "Pendulum-v1",
                       "--num_gpus", "1", "--num_learners", "4", "--num_workers", "3"])
    assert trainer_class("replay").gpu_plan(args).learner_worker_gpus == 0.25
    assert trainer_class("ppo").gpu_plan(args).rollout_worker_gpus == 0.3333
    # a loop registered by a plugin (core/algos/trainers.py) that declares nothing: its
    # rollout workers compute
    plugin = type("PluginLoop", (Trainer,), {}).gpu_plan(args)
    assert plugin.rollout_worker_gpus == 0.3333 and plugin.parameter_server_gpus == 0
    with pytest.raises(ValueError, match="computes must be"):
        plan_gpus("sac", 1, 3)


# -- (b) the device a process computes on ------------------------------------------------------
@pytest.fixture
def fake(monkeypatch):
    """Fake what Ray gave this process and what torch sees; forget earlier warnings."""
    monkeypatch.setattr(devices, "_warning", None)

    def configure(actor, gpu_ids=(), cuda=False):
        monkeypatch.setattr(devices, "in_ray_actor", lambda: actor)
        monkeypatch.setattr(ray, "get_gpu_ids", lambda: list(gpu_ids))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    return configure


@pytest.mark.parametrize("actor, gpu_ids, planned, cuda, device, warns", [
    (True, [0], 0.0, True, "cuda", False),    # Ray gave a GPU, torch can use it
    (True, [1], 0.5, False, "cpu", True),     # Ray gave a GPU, torch sees none
    (True, [], 1.0, True, "cpu", False),      # in an actor, Ray's answer counts, not the plan
    (False, [], 1.0, True, "cuda", False),    # the driver with a planned share (--num_gpus > 0)
    (False, [], 1.0, False, "cpu", True),
    (False, [0], 0.0, True, "cpu", False),    # the driver without a share stays on the CPU
])
def test_cuda_only_when_the_process_was_given_gpus_and_torch_sees_one(
        fake, capsys, actor, gpu_ids, planned, cuda, device, warns):
    fake(actor, gpu_ids, cuda)
    assert resolve_device(planned, "the parameter server") == device
    err = capsys.readouterr().err
    if warns:
        assert err.count("\n") == 1 and err.startswith("ddrl: the parameter server was given")
        assert "computes on the CPU" in err and devices._warning == err.strip()
    else:
        assert err == "" and devices._warning is None


def test_a_cuda_process_reports_its_device_and_peak_memory(fake, monkeypatch):
    """device_info on CUDA names the device and torch's peak allocation there (summary.json's
    proof that the work ran on the GPU); on the CPU it reports neither."""
    fake(True, [0], cuda=True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: f"Fake GPU {index}")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda index=None: 3 * 2 ** 20)
    info = devices.device_info("cuda")
    assert info == {"device": "cuda", "gpu_ids": [0], "warning": None,
                    "cuda_device": "Fake GPU 0", "max_memory_allocated_mb": 3.0}
    assert devices.device_info("cuda:1")["cuda_device"] == "Fake GPU 1"
    assert set(devices.device_info("cpu")) == {"device", "gpu_ids", "warning"}


def test_the_warning_is_one_line_per_process(fake, capsys):
    fake(True, [0], cuda=False)
    assert [resolve_device(0.5, f"learner worker {i}") for i in range(3)] == ["cpu"] * 3
    assert capsys.readouterr().err.count("ddrl:") == 1


def test_optimizer_state_leaves_a_process_as_cpu_tensors_without_copies_on_the_cpu():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    moved = to_cpu(state)
    assert moved["param_groups"] == state["param_groups"]
    for key, value in state["state"][0].items():
        assert moved["state"][0][key] is value  # already on the CPU: the same tensor


# -- --sac_precision auto: bf16 only where the hardware has it ----------------------------------
@pytest.mark.parametrize("avx512_bf16, amx, expected", [
    (True, False, "bf16"), (False, True, "bf16"), (False, False, "fp32")])
def test_auto_precision_is_bf16_only_on_cpus_that_multiply_bf16_natively(
        monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(devices.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert devices.resolve_precision("auto") == expected
    assert devices.resolve_precision("fp32") == "fp32"


@pytest.mark.parametrize("slow_in, expected", [("bf16", "fp32"), ("fp32", "bf16"),
                                               (None, "fp32")])
def test_time_precisions_keeps_the_faster_and_fp32_on_a_tie(monkeypatch, slow_in, expected):
    """An update that takes longer under bf16 autocast (or in fp32) is timed in both; the faster
    wins, fp32 unless bf16 gains 5% or more; the random generators are as they were. The
    updates take their time on a clock of the test's own: real sleeps of 2 ms each way, under
    a loaded CI (the e2e tier beside it), made the tie's bf16 5% faster now and then."""
    import time
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def update():
        precision = "bf16" if torch.is_autocast_enabled("cpu") else "fp32"
        torch.rand(3)  # a draw, as SAC's reparameterized actions make
        now[0] += 0.004 if precision == slow_in else 0.002

    torch.manual_seed(5)
    before = torch.get_rng_state()
    choice, ms = devices.time_precisions(update, "cpu", repeats=3)
    assert choice == expected and set(ms) == {"fp32", "bf16"}
    assert torch.equal(torch.get_rng_state(), before)
    if slow_in is not None:
        assert ms[slow_in] > 1.5 * ms[expected]


def test_explicit_bf16_where_it_is_emulated_stays_bf16_with_one_warning_per_process(
        monkeypatch, capsys):
    monkeypatch.setattr(devices, "native_bf16", lambda device_type="cpu": False)
    monkeypatch.setattr(devices, "_emulated_bf16_warned", False)
    assert [devices.resolve_precision("bf16") for _ in range(3)] == ["bf16"] * 3
    err = capsys.readouterr().err
    assert err.count("ddrl:") == 1 and "emulated" in err and "auto" in err
    monkeypatch.setattr(devices, "native_bf16", lambda device_type="cpu": True)
    monkeypatch.setattr(devices, "_emulated_bf16_warned", False)
    assert devices.resolve_precision("bf16") == "bf16" and capsys.readouterr().err == ""


def test_the_model_computes_its_update_in_the_precision_auto_resolves_to(monkeypatch):
    """The SAC model asks core/devices at its first update; autocast runs only for bf16."""
    import gymnasium as gym
    from models.sac import SACModel
    calls = []

    def fake_resolve(requested, device_type="cpu"):
        calls.append((requested, device_type))
        return "fp32"
    monkeypatch.setattr("core.distributed.devices.resolve_precision", fake_resolve)
    env = gym.make("Pendulum-v1")
    args = parse_args(["--config", "none", "--model_name", "sac", "--gym_id", "Pendulum-v1",
                       "--sac_precision", "auto", "--sac_hidden_sizes", "8,8"])
    model = SACModel(args, env.observation_space, env.action_space)
    assert model.update_precision("cpu") == "fp32" and model.update_precision("cpu") == "fp32"
    assert calls == [("auto", "cpu")]  # resolved once per device type


# -- the checks of --num_gpus ------------------------------------------------------------------
@pytest.mark.contract
def test_a_local_run_asking_for_gpus_torch_cannot_see_is_one_paragraph():
    check_local_gpus(0, 0)
    check_local_gpus(2, 2)
    with pytest.raises(ConfigError) as error:
        check_local_gpus(3, 2, "0,1")
    text = str(error.value)
    assert "--num_gpus 3" in text and "sees 2 CUDA device(s)" in text
    assert "--num_gpus 0 to 2" in text and "--address" in text and "\n" not in text
    with pytest.raises(ConfigError, match=r"Allowed here: --num_gpus 0;"):
        check_local_gpus(1, 0)


@pytest.mark.contract
def test_gpu_ids_without_num_gpus_are_said_not_silently_ignored(capsys, monkeypatch):
    """The seed's --gpu 0 alone trains on the CPU (--num_gpus 0), and the run says so."""
    from ddrl.session import TrainingSession
    from options.options import parse_args
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    session = TrainingSession(parse_args(["--config", "none", "--gpu", "0"]), 0.0)
    session.check_gpus()
    err = capsys.readouterr().err
    assert "--gpu 0 without --num_gpus: this run uses no GPU" in err
    assert "add --num_gpus 1 to train on it" in err
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    TrainingSession(parse_args(["--config", "none"]), 0.0).check_gpus()
    assert capsys.readouterr().err == ""


@pytest.mark.contract
def test_joining_a_cluster_with_fewer_gpus_than_asked_is_one_paragraph():
    check_cluster_gpus(2, 2.0, "127.0.0.1:6399")
    with pytest.raises(ConfigError) as error:
        check_cluster_gpus(2, 1.0, "127.0.0.1:6399")
    text = str(error.value)
    assert "--num_gpus 2" in text and "127.0.0.1:6399 has 1 GPU(s)" in text
    assert "--num_gpus 0 to 1" in text


@pytest.mark.contract
def test_start_ray_checks_the_joined_clusters_gpus_and_disconnects(monkeypatch):
    from core.distributed import placement
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: calls.append("init"))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(placement, "check_address_answers", lambda args: None)  # no cluster
    args = parse_args(["--config", "none", "--address", "127.0.0.1:6399", "--num_gpus", "1"])
    with pytest.raises(ConfigError, match="has 0 GPU"):
        placement.start_ray(args)
    assert calls == ["init", "shutdown"]


@pytest.mark.contract
def test_a_session_refuses_gpus_this_cpu_only_torch_cannot_see(monkeypatch):
    from ddrl.session import TrainingSession
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a fake device count
    session = TrainingSession(parse_args(["--config", "none", "--num_gpus", "1"]), 0.0)
    session.check_gpus()  # one GPU seen, one asked: fine
    session.args.num_gpus = 2
    with pytest.raises(ConfigError, match="--num_gpus 2 asks for 2 GPU"):
        session.check_gpus()
    session.args.address = "127.0.0.1:6399"
    session.check_gpus()  # the cluster's GPUs count, checked once joined


# -- (c) placement with two fake GPUs in a Ray instance of its own -----------------------------
PLACEMENT_SCRIPT = r"""
import json, sys, time
from core.distributed import loopback
loopback.prepare()  # Ray on 127.0.0.1 with token auth
import ray
ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False,
         _node_ip_address="127.0.0.1", logging_level="ERROR")
from core.sampling.eval_runner import EvalRunner
from core.distributed.placement import Placement
from core.plugins import load_plugins, make_env
from core.sampling.rollout import make_rollout_worker
from core.algos.replay_trainer import spawn_buffer, spawn_server
from core.learning.parameter_server import spawn_learner
from core.algos.trainers import trainer_class
from options.options import parse_args, run_spec
import dataclasses

placement = Placement(local=False)


def spec_for(num_gpus, num_learners):
    args = parse_args(["--config", "none", "--model_name", "sac", "--gym_id", "Pendulum-v1",
                       "--num_workers", "1", "--num_envs_per_worker", "1",
                       "--sac_hidden_sizes", "8", "--buffer_size", "100",
                       "--num_gpus", str(num_gpus), "--num_learners", str(num_learners)])
    spec = run_spec(args)
    spec = dataclasses.replace(spec, gpus=trainer_class("replay").gpu_plan(args))  # as the session
    env = make_env(load_plugins(spec), spec.env, seed=0)
    return spec, (env.observation_space, env.action_space)


def free_gpus(expected):
    # Ray's resource view follows the actors' start by a moment.
    deadline = time.time() + 10
    while ray.available_resources().get("GPU", 0.0) != expected and time.time() < deadline:
        time.sleep(0.05)
    return ray.available_resources().get("GPU", 0.0)


def scenario(num_gpus, num_learners, expected_free, server=True, others=False):
    spec, spaces = spec_for(num_gpus, num_learners)
    server = spawn_server(placement, spec, spaces) if server else None
    learners = [spawn_learner(placement, spec, spaces, i) for i in range(num_learners)
                if num_learners > 1]
    rest = []
    if others:  # the actors the plan gives no GPU
        rest = [spawn_buffer(placement, spec, spaces), make_rollout_worker(spec, 0, 0, False, 0.5),
                EvalRunner(spec, None, None, lambda: True)._make(0, 0, False)]
    ray.get([h.__ray_ready__.remote() for h in rest], timeout=60)
    found = {"server": ray.get(server.device_info.remote(), timeout=60) if server else None,
             "learners": ray.get([h.device_info.remote() for h in learners], timeout=60),
             "free_gpus": free_gpus(expected_free)}
    for handle in [server, *learners, *rest]:
        if handle is not None:
            ray.kill(handle)
    free_gpus(2.0)
    return found


def ppo_workers(num_gpus, num_workers, expected_free):
    args = parse_args(["--config", "none", "--num_workers", str(num_workers),
                       "--num_envs_per_worker", "1", "--num_gpus", str(num_gpus)])
    spec = run_spec(args)
    spec = dataclasses.replace(spec, gpus=trainer_class("ppo").gpu_plan(args))  # as the session
    workers = [make_rollout_worker(spec, i, 0, False, 0.5) for i in range(num_workers)]

    def where(worker):
        from core.distributed import devices
        return {"gpu_ids": list(ray.get_gpu_ids()), "learns_on": str(worker.agent.model.device),
                "acts_on": str(worker.model.device), "warning": devices._warning}
    found = {"workers": ray.get([w.__ray_call__.remote(where) for w in workers], timeout=60),
             "free_gpus": free_gpus(expected_free)}
    for worker in workers:
        ray.kill(worker)
    free_gpus(2.0)
    return found


print(json.dumps({
    "ppo_two_workers": ppo_workers(2, 2, expected_free=0.0),
    "ppo_four_workers_two_gpus": ppo_workers(2, 4, expected_free=0.0),
    "one_learner": scenario(2, 1, expected_free=1.0, others=True),
    "two_learners": scenario(2, 2, expected_free=0.0),
    "two_learners_one_gpu": scenario(1, 2, expected_free=1.0, server=False),
}))
ray.shutdown()
"""


@pytest.fixture(scope="module")
def placed():
    # A guard against a hang, not a speed bar: the script starts Ray and 15 actors, each
    # importing torch. On a 2-core AMD EPYC (AVX2, `import torch` 3.5 s) it took 43 s alone,
    # 77 s beside one busy loop, and over 120 s beside the e2e tier's other xdist worker (it
    # had printed all five scenarios when the old 120-s limit killed it).
    proc = subprocess.run([sys.executable, "-c", PLACEMENT_SCRIPT], cwd=REPO, text=True,
                          capture_output=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_on_cpu_with_warning(info, role):
    assert info["device"] == "cpu"  # this torch is a CPU-only build
    assert info["warning"].startswith(f"ddrl: {role} was given GPU(s)")
    assert "cannot use CUDA" in info["warning"]


@pytest.mark.e2e
def test_one_learner_the_parameter_server_reserves_a_gpu_and_nothing_else_does(placed):
    found = placed["one_learner"]
    assert len(found["server"]["gpu_ids"]) == 1
    assert_on_cpu_with_warning(found["server"], "the parameter server")
    # Of the 2 GPUs only the server's is taken: the replay buffer, a rollout worker and the
    # test worker reserved none.
    assert found["free_gpus"] == 1.0


@pytest.mark.e2e
def test_several_learners_share_the_gpus_and_the_server_stays_on_the_cpu(placed):
    assert placed["two_learners"]["server"] == {
        "device": "cpu", "gpu_ids": [], "warning": None,
        # on the CPU the updates run one by one (--device_rounds auto), without graphs
        "device_rounds": False, "pinned_batches": False, "cuda_graphs": False,
        "compiled_update": False}
    for case, shared in (("two_learners", False), ("two_learners_one_gpu", True)):
        found = placed[case]
        ids = [info["gpu_ids"] for info in found["learners"]]
        assert len(ids) == 2 and all(len(i) == 1 for i in ids)
        # Two learners on two GPUs get one each; on one GPU they get half of the same one.
        assert (ids[0] == ids[1]) is shared
        for i, info in enumerate(found["learners"]):
            assert_on_cpu_with_warning(info, f"learner worker {i}")
    assert placed["two_learners"]["free_gpus"] == 0.0
    assert placed["two_learners_one_gpu"]["free_gpus"] == 1.0


@pytest.mark.e2e
def test_ppo_rollout_workers_share_the_gpus_for_their_gradients_and_act_on_the_cpu(placed):
    two = placed["ppo_two_workers"]["workers"]
    assert sorted(len(w["gpu_ids"]) for w in two) == [1, 1]
    assert two[0]["gpu_ids"] != two[1]["gpu_ids"]          # one device each
    four = placed["ppo_four_workers_two_gpus"]["workers"]
    assert all(len(w["gpu_ids"]) == 1 for w in four)        # half of one device each
    assert sorted(w["gpu_ids"][0] for w in four) == [0, 0, 1, 1]
    for worker in two + four:
        # this torch is a CPU-only build: the learning model falls back to the CPU, saying so
        assert worker["learns_on"] == worker["acts_on"] == "cpu"
        assert worker["warning"].startswith("ddrl: rollout worker")
        assert "cannot use CUDA" in worker["warning"]
    assert placed["ppo_two_workers"]["free_gpus"] == 0.0
