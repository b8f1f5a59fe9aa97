"""Side-by-side harness: run each system of a suite as a subprocess, alternating per seed, and compare
time to target (wall clock from process start) and env steps to target, against the peer.

    .venv/bin/python benchmarks/compare.py --suite cartpole                       # all systems, seeds 0..4
    .venv/bin/python benchmarks/compare.py --suite cartpole --systems sb3 --seeds 0 1
    .venv/bin/python benchmarks/compare.py --suite cartpole --system 'fake=python -c "..."'  # ad-hoc system

Every command writes {run_dir}/summary.json (keys: env_steps, wall_time_s, best_eval_return,
last_eval_return, stopped_because, target_reached, time_to_target_s, steps_to_target, system) and an
eval curve ({run_dir}/eval.csv or metrics.csv with env_steps, wall_time_s, eval_return columns).
Writes RESULTS_DIR/<suite>.json and RESULTS_DIR/<suite>.png, prints a markdown table for BENCHMARKS.md.

A second table gives rliable's estimates across the seeds (ddrl/stats.py): the interquartile
mean of the last and best eval return and of the time to target, each with a 95% stratified-bootstrap
interval, and the probability that a run of each system beats one of the peer; the JSON keeps them
under "interval_estimates", RESULTS_DIR/<suite>-profile.png plots the performance profiles. For a
suite saved before (its run directories gone), recompute them from the JSON; nothing is rewritten:

    .venv/bin/python benchmarks/compare.py --from_json benchmarks/results/cartpole.json --results_dir /tmp
"""
import argparse
import csv
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from importlib import metadata

from ddrl.stats import (iqm, performance_profile, probability_of_improvement,
                   probability_of_improvement_ci, stratified_bootstrap_ci)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # commands run from the repo root

# Placeholders: {python} (this interpreter), {seed}, {run_dir}, {target}, {max_steps}.
# To add a suite, add an entry: target, max_steps, peer (the system ratios are taken against),
# the named commands, and optionally timeout (seconds per run; --timeout overrides, default 600).
# Systems run in the order listed.


def end_process_group(proc, grace_s=2.0):
    """SIGTERM, then SIGKILL after ``grace_s``, to the process group of ``proc`` (what it
    started too), and reap it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        time.sleep(grace_s if sig == signal.SIGTERM else 0)
    proc.wait()


def ddrl(model, agent=None):
    """ddrl's base command for one model (and agent); a suite appends the env and worker flags."""
    return ("{python} main.py --env_name gym_env --model_name " + model + (f" --agent_name {agent}" if agent else "")
            + " --seed {seed} --run_dir {run_dir} --target_return {target}")


DDRL = ddrl("ppo")
DDRL_SAC = ddrl("sac", "sac_agent")
# SB3 SAC given exactly the LunarLander preset's hyperparameters (learning rates decaying linearly)
SB3_SAC_LUNAR_EQUAL = ("{python} benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --hyperparams ddrl"
                       " --ddrl_flags '--sac_lr_schedule linear' --target_return {target} --seed {seed}"
                       " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 10000")
# DQN (issue 32): RL-Zoo's dqn.yml entries (at 22e3ff2) as ddrl's flags, what
# benchmarks/sb3_dqn.py zoo_as_ddrl gives (its docstring has the units: SB3 counts its target
# interval in env steps and trains in bursts; ddrl counts updates). Plain DQN as SB3's (no double
# Q, no dueling), one env per worker, epsilon reaching its final value at RL-Zoo's env step
# (eps_fraction halved: the runs get twice RL-Zoo's n_timesteps). The sb3-ddrl rows pass SB3
# these same flags (sb3_dqn.py --hyperparams ddrl takes ddrl's names and defaults).
DDRL_DQN = ddrl("dqn", "dqn_agent")
# CartPole-v1: lr 2.3e-3, batch 64, buffer 1e5, 1000 warm-up steps, train_freq 256 /
# gradient_steps 128 (utd 0.5), target every 10 env steps = once per burst of 128 updates,
# epsilon 1 -> 0.04 over 8,000 env steps, 256x256
DQN_CARTPOLE = ("--dqn_hidden_sizes 256,256 --dqn_lr 0.0023 --dqn_lr_schedule constant --no-dueling"
                " --no-double_q --target_update_interval 128 --tau 1 --max_grad_norm 10"
                " --exploration linear --eps_initial 1 --eps_final 0.04 --eps_fraction 0.08 --eval_eps 0"
                " --gamma 0.99 --n_step 1 --buffer_size 100000 --learning_starts 1000 --start_steps 1000"
                " --utd_ratio 0.5 --batch_size 64 --num_envs_per_worker 1 --total_steps {max_steps}")
# QR-DQN (qr_dqn against sb3-contrib's QRDQN): RL-Zoo's qrdqn.yml CartPole entry is its DQN one
# with 10 quantiles; QRDQN clips no gradients (max_grad_norm None: ddrl's --max_grad_norm 0, qr_dqn's
# default) and takes Adam's epsilon 0.01 / batch (qr_dqn's default too)
QRDQN_CARTPOLE = DQN_CARTPOLE.replace("--max_grad_norm 10", "--max_grad_norm 0") + " --n_quantiles 10"
# IQN (iqn) on the same settings: the network and loss differ, nothing else. N = N' = K = 8
# fractions, not the paper's 64/64/32: an update at 64/64/32 costs ~18x QR-DQN's on one CPU
# thread, and the paper's N ablation (its Fig. 2) finds N = 8 already near its best
IQN_CARTPOLE = (QRDQN_CARTPOLE.replace(" --n_quantiles 10", "")
                + " --num_tau_samples 8 --num_tau_prime_samples 8 --num_quantile_samples 8")
# C51 (c51) on the same settings: a categorical distribution on CleanRL's CartPole support (101
# atoms on [-100, 100]) in place of the 10 quantiles; Adam's epsilon 0.01 / batch as QR-DQN's
C51_CARTPOLE = (QRDQN_CARTPOLE.replace(" --n_quantiles 10", "")
                + " --n_atoms 101 --v_min -100 --v_max 100")
# LunarLander-v3: lr 6.3e-4, batch 128, buffer 5e4, no warm-up, train_freq 4 / gradient_steps -1
# (utd 1), target every 250 env steps = 250 updates, epsilon 1 -> 0.1 over 12,000 env steps, 256x256
DQN_LUNAR = ("--dqn_hidden_sizes 256,256 --dqn_lr 0.00063 --dqn_lr_schedule constant --no-dueling"
             " --no-double_q --target_update_interval 250 --tau 1 --max_grad_norm 10"
             " --exploration linear --eps_initial 1 --eps_final 0.1 --eps_fraction 0.06 --eval_eps 0"
             " --gamma 0.99 --n_step 1 --buffer_size 50000 --learning_starts 0 --start_steps 0"
             " --utd_ratio 1 --batch_size 128 --num_envs_per_worker 1 --total_steps {max_steps}")
# Rainbow (c51 with every extension; configs/rainbow-LunarLander-v3.yaml is the same) on DQN_LUNAR's
# cadence and sizes: 51 atoms on [-200, 200], dueling, double-Q, noisy layers for exploration (the
# epsilon flags then unused), prioritized replay (alpha 0.5, beta 0.4 -> 1), 3-step returns, Adam's
# epsilon 1.5e-4 (the paper's)
RAINBOW_LUNAR = (DQN_LUNAR.replace("--no-dueling", "--dueling").replace("--no-double_q", "--double_q")
                 .replace("--exploration linear --eps_initial 1 --eps_final 0.1 --eps_fraction 0.06",
                          "--exploration noisy --noisy_sigma0 0.5")
                 .replace("--n_step 1", "--n_step 3")
                 + " --n_atoms 51 --v_min -200 --v_max 200 --c51_adam_eps 0.00015 --prioritized_replay"
                   " --priority_alpha 0.5 --priority_beta 0.4")
# Atari: the Nature CNN straight into the Q head, lr 1e-4, batch 32, buffer 1e5, train_freq 4 /
# gradient_steps 1 (utd 0.25), target every 1000 env steps = 250 updates, epsilon 1 -> 0.01 over
# 10% of the run; RL-Zoo's 10M-step schedule shrunk to the 250k-step run (its 100k warm-up to 2,500)
DQN_ATARI = ("--encoder nature_cnn --cnn_features 512 --dqn_hidden_sizes none --dqn_lr 0.0001"
             " --dqn_lr_schedule constant --no-dueling --no-double_q --target_update_interval 250 --tau 1"
             " --max_grad_norm 10 --exploration linear --eps_initial 1 --eps_final 0.01 --eps_fraction 0.1"
             " --eval_eps 0 --gamma 0.99 --n_step 1 --buffer_size 100000 --learning_starts 2500"
             " --start_steps 2500 --utd_ratio 0.25 --batch_size 32 --num_envs_per_worker 1"
             " --total_steps {max_steps}")
# SAC with hindsight replay on FetchReach-v4: configs/sac-her-FetchReach.yaml's flags (RL-Zoo's
# HER entry) written out, so that the control row can leave --her out
FETCH_SAC = ("--gym_id FetchReach-v4 --config none --num_workers 0 --num_envs_per_worker 1"
             " --batch_size 256 --buffer_size 1000000 --learning_starts 1000 --start_steps 1000"
             " --utd_ratio 1.0 --weight_sync_interval 32 --sac_hidden_sizes 64,64 --sac_gamma 0.95"
             " --tau 0.005 --actor_lr 0.001 --critic_lr 0.001 --alpha_lr 0.001 --eval_interval 2000"
             " --log_steps 1000 --total_steps {max_steps}")
SLOW_CARTPOLE = (" --step_ms 5 --step_sigma 1 --slow_reset_ms 100 --slow_reset_prob 0.1 --slow_workers 0"
                 " --slow_factor 4 --num_workers 8 --num_envs_per_worker 4 --rollout_steps 32 --batch_size 256"
                 " --num_epochs 10 --gamma 0.98 --lr 0.001 --lr_schedule linear --clip_range 0.2"
                 " --clip_schedule linear --eval_interval 4000 --eval_episodes 5 --total_steps {max_steps}")
# Deep exploration: bsuite's deep sea (envs/toys.py DeepSea-v0, 20 x 20: the reward needs 19
# moves right in a row, each action's meaning drawn per cell) with small-CartPole-like PPO
# settings, 16 envs in one process; the observations are one-hot cells, left unnormalized (a
# one-hot cell's running std is near 0 until it is visited, which --normalize_obs turns into
# inputs that keep moving: RND's novelty then never settles; BENCHMARKS.md "Exploration")
DEEP_SEA = ("--gym_id ddrl/DeepSea-v0 --gym_kwargs size=20 --num_workers 0 --num_envs_per_worker 16"
            " --rollout_steps 32 --batch_size 128 --num_epochs 4 --gamma 0.99 --gae_lambda 0.95"
            " --ent_coef 0.01 --lr 3e-4 --lr_schedule constant --clip_schedule constant"
            " --total_steps {max_steps} --eval_interval 5120 --eval_episodes 1")

DEEP_SEA_DQN = ("--gym_id ddrl/DeepSea-v0 --gym_kwargs size=10 --num_workers 0 --learner_threads 1"
                " --total_steps {max_steps} --eval_interval 5120 --eval_episodes 1")

SUITES = {
    "cartpole": dict(
        target=475, max_steps=None, peer="sb3",
        systems={
            # the default: learning starts in-process while Ray and the 2 workers start
            "ddrl-2workers": DDRL + " --gym_id CartPole-v1 --num_workers 2",
            "ddrl-2workers-wait": DDRL + " --gym_id CartPole-v1 --num_workers 2 --no-elastic_start",
            "ddrl-0workers": DDRL + " --gym_id CartPole-v1 --num_workers 0",
            # the asynchronous loop on its CartPole preset (configs/appo-CartPole-v1.yaml): a
            # cheap, even env, where waiting for the slowest worker costs little
            "ddrl-appo-2workers": ddrl("appo", "vtrace_agent") + " --gym_id CartPole-v1 --num_workers 2",
            "sb3": "{python} benchmarks/sb3_ppo.py --env CartPole-v1 --target_return {target} --seed {seed} --out_dir {run_dir}",
        }),
    # ddrl's own acceptance bar on Pendulum PPO is -400; the comparison uses -200 (--target to change).
    "pendulum-ppo": dict(
        target=-200, max_steps=300_000, peer="sb3",
        systems={
            # the preset before gSDE (commit 7606222), written out: the preset has changed since
            "ddrl-2workers": DDRL + " --gym_id Pendulum-v1 --num_workers 2 --num_envs_per_worker 4 --total_steps {max_steps}"
                             " --rollout_steps 256 --batch_size 256 --lr_schedule linear --no-use_sde"
                             " --sde_sample_freq -1 --grad_workers auto",
            "sb3": "{python} benchmarks/sb3_ppo.py --env Pendulum-v1 --target_return {target} --seed {seed}"
                   " --out_dir {run_dir} --max_steps {max_steps}",
        }),
    # SAC; both systems evaluate every 1000 env steps (ddrl --eval_interval, sb3 --eval_freq).
    # ddrl: its automatic preset configs/sac-Pendulum-v1.yaml; sb3: the same hyperparameters;
    # sb3-defaults: SB3's own default SAC settings.
    "pendulum-sac": dict(
        target=-200, max_steps=20_000, peer="sb3",
        systems={
            # ddrl-0workers-bf16 is the preset (configs/sac-Pendulum-v1.yaml); every row spells out
            # its precision and learner threads so that it stays what BENCHMARKS.md measured.
            "ddrl-0workers": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 0 --sac_precision fp32"
                             " --learner_threads 1 --total_steps {max_steps} --eval_interval 1000",
            "ddrl-2workers": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 2 --sac_precision fp32"
                             " --learner_threads 1 --total_steps {max_steps} --eval_interval 1000",
            # one process with the update in fp32 on both cores: the preset on a CPU without
            # native bf16 (--sac_precision auto); before commit 61c528b "--learner_threads 2"
            # with --num_workers 0 ran on one thread
            "ddrl-0workers-2threads": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 0 --sac_precision fp32"
                                      " --learner_threads 2 --total_steps {max_steps} --eval_interval 1000",
            # the same hyperparameters, the update's matrix products in bfloat16; one process
            # with both cores on the update, or 2 workers with the update on one
            "ddrl-0workers-bf16": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 0 --sac_precision bf16"
                                  " --learner_threads 2 --total_steps {max_steps} --eval_interval 1000",
            "ddrl-2workers-bf16": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 2 --sac_precision bf16"
                                  " --learner_threads 1 --total_steps {max_steps} --eval_interval 1000",
            # 2 workers, the update on both cores: two learner processes on the halves of each
            # batch, averaging their gradients with one allreduce (--learner_sync allreduce)
            "ddrl-2workers-allreduce": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 2 --sac_precision fp32"
                                       " --learner_threads 1 --num_learners 2 --learner_sync allreduce"
                                       " --total_steps {max_steps} --eval_interval 1000",
            "ddrl-2workers-allreduce-bf16": DDRL_SAC + " --gym_id Pendulum-v1 --num_workers 2 --sac_precision bf16"
                                            " --learner_threads 1 --num_learners 2 --learner_sync allreduce"
                                            " --total_steps {max_steps} --eval_interval 1000",
            # the peer on equal terms: SB3 given ddrl's preset hyperparameters (sb3_sac.py --hyperparams ddrl)
            "sb3": "{python} benchmarks/sb3_sac.py --env Pendulum-v1 --hyperparams ddrl --target_return {target}"
                   " --seed {seed} --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000",
            "sb3-2threads": "{python} benchmarks/sb3_sac.py --env Pendulum-v1 --hyperparams ddrl --target_return {target}"
                            " --seed {seed} --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000"
                            " --torch_threads 2",
            "sb3-defaults": "{python} benchmarks/sb3_sac.py --env Pendulum-v1 --target_return {target} --seed {seed}"
                            " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000",
        }),
    # TD3; both evaluate every 1000 env steps. ddrl: its automatic preset
    # configs/td3-Pendulum-v1.yaml (SB3's TD3 defaults with 256x256 networks); sb3: SB3's TD3 given
    # exactly those hyperparameters (sb3_sac.py --algo td3 --hyperparams ddrl); sb3-zoo: RL-Zoo's
    # td3.yml entry (400x300, gamma 0.98, 10k warm-up). Each row spells out its precision and
    # threads: one thread each (two runs side by side on a 2-core machine: --systems
    # ddrl-1thread in one invocation, sb3 in the other), or both cores each.
    # TQC (sb3-contrib's defaults, configs/tqc-Pendulum-v1.yaml): ddrl's preset as it runs
    # (one process, the update on both cores in the faster precision) and in fp32 on one thread;
    # sb3: sb3-contrib's TQC given exactly the preset's hyperparameters (sb3_sac.py --hyperparams
    # ddrl), on one thread and on two; ddrl-sac: ddrl's SAC preset, the same settings without
    # the quantiles, for what TQC buys here.
    "pendulum-tqc": dict(
        target=-200, max_steps=20_000, peer="sb3",
        systems={
            "ddrl-preset": ddrl("tqc") + " --gym_id Pendulum-v1 --total_steps {max_steps}"
                           " --eval_interval 1000",
            "ddrl-fp32-1thread": ddrl("tqc") + " --gym_id Pendulum-v1 --sac_precision fp32"
                                 " --learner_threads 1 --total_steps {max_steps} --eval_interval 1000",
            "sb3": "{python} benchmarks/sb3_sac.py --algo tqc --env Pendulum-v1 --hyperparams ddrl"
                   " --ddrl_flags '--sac_precision fp32' --target_return {target} --seed {seed}"
                   " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000",
            "sb3-2threads": "{python} benchmarks/sb3_sac.py --algo tqc --env Pendulum-v1"
                            " --hyperparams ddrl --ddrl_flags '--sac_precision fp32'"
                            " --target_return {target} --seed {seed} --out_dir {run_dir}"
                            " --max_steps {max_steps} --eval_freq 1000 --torch_threads 2",
            "ddrl-sac": ddrl("sac") + " --gym_id Pendulum-v1 --total_steps {max_steps}"
                        " --eval_interval 1000",
        }),
    # TQC on LunarLanderContinuous-v3 (configs/tqc-LunarLanderContinuous-v3.yaml: RL-Zoo's entry,
    # 256x256): ddrl's preset as it runs (one process, the update on both cores) against
    # sb3-contrib's TQC given exactly its hyperparameters on two threads too (the learning rates
    # decay over the same 500k steps).
    "lunar-tqc": dict(
        target=200, max_steps=500_000, peer="sb3", timeout=3600,
        systems={
            "ddrl-preset": ddrl("tqc") + " --gym_id LunarLanderContinuous-v3"
                           " --total_steps {max_steps} --eval_interval 10000",
            "sb3": "{python} benchmarks/sb3_sac.py --algo tqc --env LunarLanderContinuous-v3"
                   " --hyperparams ddrl --ddrl_flags '--sac_precision fp32'"
                   " --target_return {target} --seed {seed} --out_dir {run_dir}"
                   " --max_steps {max_steps} --eval_freq 10000 --torch_threads 2",
        }),
    "pendulum-td3": dict(
        target=-200, max_steps=20_000, peer="sb3",
        systems={
            "ddrl-1thread": ddrl("td3") + " --gym_id Pendulum-v1 --num_workers 0 --td3_precision fp32"
                            " --learner_threads 1 --total_steps {max_steps} --eval_interval 1000",
            "sb3": "{python} benchmarks/sb3_sac.py --algo td3 --env Pendulum-v1 --hyperparams ddrl"
                   " --ddrl_flags '--td3_precision fp32' --target_return {target} --seed {seed}"
                   " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000",
            # the preset as it runs: the update on both cores in the faster precision
            "ddrl-preset": ddrl("td3") + " --gym_id Pendulum-v1 --total_steps {max_steps} --eval_interval 1000",
            "sb3-2threads": "{python} benchmarks/sb3_sac.py --algo td3 --env Pendulum-v1 --hyperparams ddrl"
                            " --ddrl_flags '--td3_precision fp32' --target_return {target} --seed {seed}"
                            " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000 --torch_threads 2",
            "sb3-zoo": "{python} benchmarks/sb3_sac.py --algo td3 --env Pendulum-v1 --target_return {target}"
                       " --seed {seed} --out_dir {run_dir} --max_steps {max_steps} --eval_freq 1000",
        }),
    # SAC; sb3-zoo with the RL-Zoo LunarLanderContinuous-v3 settings (its lin_ learning rate decays
    # over max_steps = RL-Zoo's n_timesteps). Evaluations every 10000 env steps on all. Up to 1 h a run.
    "lunar-sac": dict(
        target=200, max_steps=500_000, peer="sb3", timeout=3600,
        systems={
            # the preset of commit 324b708 (2 workers, fp32, constant rates), spelled out since
            # the preset changed (now lunar-sac-lr-decay's ddrl row); the rest from the preset
            "ddrl-2workers": DDRL_SAC + " --gym_id LunarLanderContinuous-v3 --num_workers 2 --total_steps {max_steps}"
                             " --sac_precision fp32 --learner_threads 1 --sac_lr_schedule constant"
                             " --eval_interval 10000",
            # the preset's hyperparameters in one process, the update in bf16 on both cores
            "ddrl-0workers-bf16": DDRL_SAC + " --gym_id LunarLanderContinuous-v3 --num_workers 0"
                                  " --sac_precision bf16 --learner_threads 2 --sac_lr_schedule constant"
                                  " --total_steps {max_steps} --eval_interval 10000",
            # the peer on equal terms: SB3 given exactly ddrl's hyperparameters (net sizes, constant lr,
            # warm-up, batch, tau; sb3_sac.py --hyperparams ddrl); RL-Zoo's own settings as a second row
            "sb3": "{python} benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --hyperparams ddrl"
                   " --ddrl_flags '--sac_lr_schedule constant' --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                   " --eval_freq 10000 --torch_threads 2",
            "sb3-zoo": "{python} benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --target_return {target} --seed {seed}"
                       " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 10000 --torch_threads 2",
        }),
    # LunarLanderContinuous-v3 with the learning rates decaying linearly to 0 over 500k steps
    # (RL-Zoo's lin_7.3e-4), otherwise the lunar-sac preset's hyperparameters; ddrl in one process
    # with the update in bf16 on both cores; sb3: SB3 given exactly these hyperparameters
    # (its update in fp32, the only precision it has); sb3-zoo: RL-Zoo's own entry (400x300).
    "lunar-sac-lr-decay": dict(
        target=200, max_steps=500_000, peer="sb3", timeout=3600,
        systems={
            "ddrl-0workers-bf16": DDRL_SAC + " --gym_id LunarLanderContinuous-v3 --num_workers 0"
                                  " --sac_precision bf16 --learner_threads 2 --sac_lr_schedule linear"
                                  " --total_steps {max_steps} --eval_interval 10000",
            # the preset on a CPU without native bf16 (--sac_precision auto chooses fp32)
            "ddrl-0workers-fp32": DDRL_SAC + " --gym_id LunarLanderContinuous-v3 --num_workers 0"
                                  " --sac_precision fp32 --learner_threads 2 --sac_lr_schedule linear"
                                  " --total_steps {max_steps} --eval_interval 10000",
            "sb3": SB3_SAC_LUNAR_EQUAL + " --torch_threads 2",
            # one core each, for two runs side by side on a 2-core machine (two invocations at
            # once: --systems ddrl-fp32-1thread in one, sb3-1thread in the other)
            "ddrl-fp32-1thread": DDRL_SAC + " --gym_id LunarLanderContinuous-v3 --num_workers 0"
                                 " --sac_precision fp32 --learner_threads 1 --sac_lr_schedule linear"
                                 " --total_steps {max_steps} --eval_interval 10000",
            "sb3-1thread": SB3_SAC_LUNAR_EQUAL + " --torch_threads 1",
            "sb3-zoo": "{python} benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --target_return {target} --seed {seed}"
                       " --out_dir {run_dir} --max_steps {max_steps} --eval_freq 10000 --torch_threads 2",
        }),
    # CrossQ on LunarLanderContinuous-v3 (RL-Zoo's crossq.yml: 200k steps, 10k warm-up; otherwise
    # sb3-contrib's defaults, which ddrl's crossq shares: lr 1e-3, 256x256 actor, 1024x1024
    # critics, policy delay 3, Adam beta1 0.5). sb3: sb3-contrib's CrossQ given exactly ddrl's
    # settings; sb3-zoo: RL-Zoo's entry.
    "lunar-crossq": dict(
        target=200, max_steps=200_000, peer="sb3", timeout=3600,
        systems={
            "ddrl-2workers": ddrl("crossq") + " --gym_id LunarLanderContinuous-v3 --num_workers 2"
                             " --total_steps {max_steps} --learning_starts 10000 --start_steps 10000"
                             " --eval_interval 10000",
            "sb3": "{python} benchmarks/sb3_sac.py --algo crossq --env LunarLanderContinuous-v3"
                   " --hyperparams ddrl --ddrl_flags '--learning_starts 10000 --start_steps 10000'"
                   " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                   " --eval_freq 10000 --torch_threads 2",
            "sb3-zoo": "{python} benchmarks/sb3_sac.py --algo crossq --env LunarLanderContinuous-v3"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                       " --eval_freq 10000 --torch_threads 2",
        }),
    # PPO with gSDE on Pendulum-v1 against SB3 PPO with RL-Zoo's tuned (gSDE) settings.
    # ddrl-0workers: the preset (configs/ppo-Pendulum-v1.yaml: RL-Zoo's shape and gSDE, one
    # process); ddrl-2workers: 2 Ray workers x 2 envs, the learner computing the 640 minibatch
    # steps per round on their data; ddrl-2workers-calls: a gradient call to each worker per step.
    "pendulum-ppo-sde": dict(
        target=-200, max_steps=300_000, peer="sb3",
        systems={
            "ddrl-0workers": DDRL + " --gym_id Pendulum-v1 --total_steps {max_steps}",
            "ddrl-2workers": DDRL + " --gym_id Pendulum-v1 --num_workers 2 --num_envs_per_worker 2"
                             " --total_steps {max_steps}",
            "ddrl-2workers-calls": DDRL + " --gym_id Pendulum-v1 --num_workers 2 --num_envs_per_worker 2"
                                   " --grad_workers auto --total_steps {max_steps}",
            "sb3": "{python} benchmarks/sb3_ppo.py --env Pendulum-v1 --target_return {target} --seed {seed}"
                   " --out_dir {run_dir} --max_steps {max_steps}",
        }),
    # PPO on ALE/Breakout-v5 for 1M frames (250k agent steps), RL-Zoo's Atari settings in both:
    # ddrl its automatic preset configs/ppo-atari.yaml (2 torch threads: faster here, see
    # BENCHMARKS.md); sb3: sb3_ppo.py's ALE/Breakout-v5 entry, the same hyperparameters on ddrl's
    # own env chain (envs/gym_env.py wrap_atari), 2 torch threads. Both play 5 whole games
    # (unclipped score) every 25k agent steps. No target: the measures are the last evaluation
    # (at 1M frames) and the run's wall time.
    "breakout-ppo": dict(
        target=None, max_steps=250_000, peer="sb3", timeout=5400,
        systems={
            "ddrl-0workers": DDRL + " --gym_id ALE/Breakout-v5 --num_workers 0 --torch_threads 2"
                             " --total_steps {max_steps}",
            "sb3": "{python} benchmarks/sb3_ppo.py --env ALE/Breakout-v5 --seed {seed} --out_dir {run_dir}"
                   " --max_steps {max_steps} --torch_threads 2",
        }),
    # PPO on Breakout through EnvPool's C++ envs against gym_env's ALE chain: the same
    # hyperparameters (configs/ppo-atari.yaml and its EnvPool twin configs/ppo-atari-envpool.yaml),
    # the same preprocessing flags, 1M frames, one process each (issue 47).
    "breakout-envpool": dict(
        target=None, max_steps=250_000, peer="ddrl-gym", timeout=5400,
        systems={
            "ddrl-envpool": "{python} main.py --config configs/ppo-atari-envpool.yaml --seed {seed}"
                            " --run_dir {run_dir} --total_steps {max_steps}",
            "ddrl-gym": "{python} main.py --config configs/ppo-atari.yaml --seed {seed}"
                        " --run_dir {run_dir} --total_steps {max_steps}",
        }),
    # SAC on HalfCheetah with 16 envs in one EnvPool pool (configs/sac-mujoco-envpool.yaml:
    # HalfCheetah-v4, EnvPool has no v5) against 16 of gym_env's v5 envs in gymnasium's
    # SyncVectorEnv, the same hyperparameters (configs/sac-mujoco.yaml's), one process each.
    "halfcheetah-envpool": dict(
        target=None, max_steps=30_000, peer="ddrl-gym-sync", timeout=3600,
        systems={
            "ddrl-envpool": "{python} main.py --config configs/sac-mujoco-envpool.yaml --seed {seed}"
                            " --run_dir {run_dir} --total_steps {max_steps}",
            "ddrl-gym-sync": "{python} main.py --config configs/sac-mujoco.yaml --vectorize sync"
                             " --num_envs_per_worker 16 --seed {seed} --run_dir {run_dir}"
                             " --total_steps {max_steps}",
        }),
    # SAC on HalfCheetah-v5 for 100k steps: ddrl its automatic preset configs/sac-mujoco.yaml
    # (RL-Zoo's MuJoCo entry), one process (ddrl-0workers-fp32: the same in fp32); sb3: SB3 given
    # exactly those hyperparameters (sb3_sac.py --hyperparams ddrl), 2 torch threads. 5 episodes
    # every 10k steps; no target.
    "halfcheetah-sac": dict(
        target=None, max_steps=100_000, peer="sb3", timeout=5400,
        systems={
            "ddrl-0workers": DDRL_SAC + " --gym_id HalfCheetah-v5 --num_workers 0 --total_steps {max_steps}",
            # the preset with the update in fp32 whatever the CPU (auto picks bf16 where it is
            # faster): the same arithmetic as SB3's, so the returns compare the algorithms
            "ddrl-0workers-fp32": DDRL_SAC + " --gym_id HalfCheetah-v5 --num_workers 0 --sac_precision fp32"
                                  " --total_steps {max_steps}",
            "sb3": "{python} benchmarks/sb3_sac.py --env HalfCheetah-v5 --hyperparams ddrl --seed {seed}"
                   " --out_dir {run_dir} --max_steps {max_steps} --torch_threads 2",
        }),
    # Recurrent PPO on CartPole-v1 with the velocities hidden (entries 1 and 3: RL-Zoo's
    # CartPoleNoVel-v1). sb3-zoo: sb3-contrib's RecurrentPPO with RL-Zoo's tuned ppo_lstm.yml
    # entry and its budget (1e5 steps, lin_ schedules to 0 there; sb3_recurrent.py's docstring);
    # sb3-ddrl: RecurrentPPO given ddrl's settings by flags (--hyperparams ddrl; linear schedules
    # over --schedule_steps = ddrl's --total_steps). ddrl-mlp-2workers: the control without
    # memory, expected not to reach the target: it runs the suite's max_steps.
    "cartpole-novel": dict(
        target=475, max_steps=200_000, peer="sb3-zoo", timeout=1200,
        systems={
            "ddrl-lstm-2workers": DDRL + " --gym_id CartPole-v1 --hide_obs 1,3 --recurrent lstm --num_workers 2",
            "ddrl-lstm-0workers": DDRL + " --gym_id CartPole-v1 --hide_obs 1,3 --recurrent lstm --num_workers 0",
            "ddrl-mlp-2workers": DDRL + " --gym_id CartPole-v1 --hide_obs 1,3 --num_workers 2"
                                 " --total_steps {max_steps}",
            "sb3-zoo": "{python} benchmarks/sb3_recurrent.py --env cartpole-novel --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir}",
            # the peer given ddrl's settings: the CartPole preset (8 envs x 32 steps, batch 256,
            # 10 epochs, schedules over its 1e6 total steps) and ddrl's recurrent defaults (an
            # LSTM-64 after the observation, the critic with its own, 64,64 tanh heads)
            "sb3-ddrl": "{python} benchmarks/sb3_recurrent.py --env cartpole-novel --hyperparams ddrl"
                        " --n_envs 8 --n_steps 32 --batch_size 256 --n_epochs 10 --gamma 0.98"
                        " --gae_lambda 0.8 --lr 0.001 --lr_schedule linear --clip_range 0.2"
                        " --clip_schedule linear --ent_coef 0.0 --vf_coef 0.5 --max_grad_norm 0.5"
                        " --lstm_hidden_size 64 --critic_lstm separate --net_arch 64,64"
                        " --activation tanh --ortho_init --normalize none --hide drop"
                        " --schedule_steps 1000000 --target_return {target} --seed {seed}"
                        " --out_dir {run_dir} --max_steps {max_steps}",
        }),
    # The same on Pendulum-v1 with the angular velocity hidden (entry 2: PendulumNoVel-v1);
    # RL-Zoo budgets 1e5 steps (sb3-zoo runs that), the others get ddrl's Pendulum budget, 300k
    # (RecurrentPPO on one core: ~10 s per 4k steps with RL-Zoo's settings, hence the timeout).
    "pendulum-novel": dict(
        target=-200, max_steps=300_000, peer="sb3-zoo", timeout=3600,
        systems={
            # the Pendulum preset (4 envs x 1024 steps, 10 epochs, gamma 0.9, constant rates) with
            # memory: no gSDE (it has no recurrent form), sequences of 128 steps (--bptt_len) in
            # minibatches of 128 steps, one sequence each
            "ddrl-lstm-0workers": DDRL + " --gym_id Pendulum-v1 --hide_obs 2 --recurrent lstm --num_workers 0"
                                  " --no-use_sde --bptt_len 128 --batch_size 128 --total_steps {max_steps}",
            # --sample_ahead off: a round here is 320 minibatch steps, so a fragment sampled
            # ahead is 320 updates behind the learner (policy_lag); --sample_ahead auto kept it
            # on for its speed and seed 0 stayed below -200 in 300k steps. --grad_workers 0: the
            # learner computes the round's 320 minibatch steps on the pooled sequences itself, as
            # the Pendulum preset does (a Ray call per minibatch step costs more than it saves)
            "ddrl-lstm-2workers": DDRL + " --gym_id Pendulum-v1 --hide_obs 2 --recurrent lstm --num_workers 2"
                                  " --num_envs_per_worker 2 --no-use_sde --bptt_len 128 --batch_size 128"
                                  " --sample_ahead off --grad_workers 0 --total_steps {max_steps}",
            # the control: the same without memory
            "ddrl-mlp-0workers": DDRL + " --gym_id Pendulum-v1 --hide_obs 2 --num_workers 0 --no-use_sde"
                                 " --batch_size 128 --total_steps {max_steps}",
            "sb3-zoo": "{python} benchmarks/sb3_recurrent.py --env pendulum-novel --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir}",
            # the peer given ddrl's settings (the rows above: 4 x 1024, batch 128, no gSDE, an
            # LSTM-64 with one of its own for the critic, 64,64 tanh heads, constant rates)
            "sb3-ddrl": "{python} benchmarks/sb3_recurrent.py --env pendulum-novel --hyperparams ddrl"
                        " --n_envs 4 --n_steps 1024 --batch_size 128 --n_epochs 10 --gamma 0.9"
                        " --gae_lambda 0.95 --lr 0.001 --lr_schedule constant --clip_range 0.2"
                        " --clip_schedule constant --ent_coef 0.0 --vf_coef 0.5 --max_grad_norm 0.5"
                        " --lstm_hidden_size 64 --critic_lstm separate --net_arch 64,64"
                        " --activation tanh --ortho_init --normalize none --hide drop --no-use_sde"
                        " --log_std_init 0.0 --schedule_steps {max_steps}"
                        " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}",
        }),
    # Hindsight replay on FetchReach-v4 (sparse rewards: -1 a step until the gripper is within
    # 5 cm of the goal; 50 steps an episode), SAC with RL-Zoo's HER entry (FETCH_SAC: 64x64, lr
    # 1e-3, gamma 0.95, 1k warm-up, future goals, k 4) in one process: ddrl-her, its control
    # without --her, and SB3's SAC with its HerReplayBuffer given the same settings
    # (sb3_her.py --hyperparams ddrl; RL-Zoo's entry is the same but for observation
    # normalization, which --her refuses). Evaluations every 2,000 env steps.
    "fetchreach-her": dict(
        target=-5, max_steps=20_000, peer="sb3", timeout=1800,
        systems={
            "ddrl-her": DDRL_SAC + " " + FETCH_SAC + " --her --her_strategy future --her_k 4",
            "ddrl-no-her": DDRL_SAC + " " + FETCH_SAC,
            "sb3": "{python} benchmarks/sb3_her.py --env FetchReach-v4 --hyperparams ddrl"
                   " --ddrl_flags '--config configs/sac-her-FetchReach.yaml' --target_return {target}"
                   " --seed {seed} --out_dir {run_dir} --max_steps {max_steps} --eval_freq 2000",
        }),
    # DQN on CartPole-v1: RL-Zoo's CartPole entry (DQN_CARTPOLE above) in ddrl, one process or 2
    # Ray workers (one env each: 2 envs where RL-Zoo has 1), the update on one thread; sb3-zoo:
    # SB3's DQN with RL-Zoo's entry (sb3_dqn.py --hyperparams zoo: 100k steps, epsilon over
    # RL-Zoo's 8,000); sb3-ddrl: SB3 given ddrl-0workers' flags (--hyperparams ddrl: bursts of
    # 32 updates after each 64-step fragment as ddrl's, where RL-Zoo has 128 after 256).
    # Evaluations every 2,000 env steps on all.
    # The asynchronous loop (issue 48) against the synchronous one on a slow, uneven simulator:
    # CartPole behind benchmarks/plugins/slow_env.py (5 ms lognormal steps, sigma 1; 1 reset in
    # 10 waits 100 ms more; rollout worker 0 is 4x slower), 8 workers x 4 envs. Both on their
    # CartPole presets' settings (8 envs x 32 steps per 256-sample batch, 10 epochs, gamma
    # 0.98, lr 1e-3 and clip 0.2 decaying linearly); PPO samples ahead. 5 evaluation episodes
    # every 4,000 env steps (the test worker's envs are slow too).
    "cartpole-slow": dict(
        target=475, max_steps=400_000, peer="ppo-sync", timeout=900,
        systems={
            "ppo-sync": "{python} main.py --user_dir benchmarks/plugins --env_name slow_env --gym_id CartPole-v1"
                        " --model_name ppo" + SLOW_CARTPOLE + " --sample_ahead on --gae_lambda 0.8"
                        " --seed {seed} --run_dir {run_dir} --target_return {target}",
            "appo": "{python} main.py --user_dir benchmarks/plugins --env_name slow_env --gym_id CartPole-v1"
                    " --model_name appo" + SLOW_CARTPOLE + " --seed {seed} --run_dir {run_dir}"
                    " --target_return {target}",
        }),
    "cartpole-dqn": dict(
        target=475, max_steps=100_000, peer="sb3-zoo", timeout=1200,
        systems={
            "ddrl-0workers": DDRL_DQN + " --gym_id CartPole-v1 --num_workers 0 --learner_threads 1 "
                             + DQN_CARTPOLE + " --eval_interval 2000",
            "ddrl-2workers": DDRL_DQN + " --gym_id CartPole-v1 --num_workers 2 --learner_threads 1 "
                             + DQN_CARTPOLE + " --eval_interval 2000",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                       " --eval_freq 2000",
            "sb3-ddrl": "{python} benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams ddrl --num_workers 0 "
                        + DQN_CARTPOLE + " --target_return {target} --seed {seed} --out_dir {run_dir}"
                        " --eval_freq 2000",
        }),
    # PQN (models/pqn.py) on CartPole-v1: its preset (configs/pqn-CartPole-v1.yaml, CleanRL's
    # pqn.py settings over 500k-step schedules, one process) against the replay-based DQN people
    # pick instead, both as in cartpole-dqn (RL-Zoo's tuned entry, 100k-step budget and
    # schedules): SB3's DQN (sb3-zoo, the peer) and ddrl's own. SB3 has no PQN. ddrl-pqn-vec:
    # configs/pqn-CartPole-v1-vec.yaml, the preset on a batched simulator.
    "cartpole-pqn": dict(
        target=475, max_steps=500_000, peer="sb3-zoo", timeout=1200,
        systems={
            "ddrl-pqn": ddrl("pqn") + " --gym_id CartPole-v1",
            # the same rounds' sizes from 32 envs x 16 steps of gymnasium's native vector env
            "ddrl-pqn-vec": ddrl("pqn") + " --gym_id CartPole-v1 --config pqn-CartPole-v1-vec",
            "ddrl-dqn": DDRL_DQN + " --gym_id CartPole-v1 --num_workers 0 --learner_threads 1 "
                        + DQN_CARTPOLE.replace("{max_steps}", "100000") + " --eval_interval 2000",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps 100000"
                       " --eval_freq 2000",
        }),
    # PQN on LunarLander-v3: its preset (configs/pqn-LunarLander-v3.yaml) against SB3's DQN with
    # RL-Zoo's tuned entry as lunar-dqn runs it (200k-step budget and schedules).
    "lunar-pqn": dict(
        target=200, max_steps=1_000_000, peer="sb3-zoo", timeout=3600,
        systems={
            "ddrl-pqn": ddrl("pqn") + " --gym_id LunarLander-v3",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --env LunarLander-v3 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps 200000"
                       " --eval_freq 5000",
        }),
    # QR-DQN on CartPole-v1, as cartpole-dqn: ddrl's qr_dqn with RL-Zoo's qrdqn.yml entry
    # (QRDQN_CARTPOLE; configs/qr_dqn-CartPole-v1.yaml is the same), sb3-contrib's QRDQN with
    # RL-Zoo's entry (sb3-zoo) and with ddrl-0workers' flags (sb3-ddrl).
    "cartpole-qrdqn": dict(
        target=475, max_steps=100_000, peer="sb3-zoo", timeout=1200,
        systems={
            "ddrl-0workers": ddrl("qr_dqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                             " --learner_threads 1 " + QRDQN_CARTPOLE + " --eval_interval 2000",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --algo qrdqn --env CartPole-v1 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                       " --eval_freq 2000",
            "sb3-ddrl": "{python} benchmarks/sb3_dqn.py --algo qrdqn --env CartPole-v1 --hyperparams ddrl"
                        " --num_workers 0 " + QRDQN_CARTPOLE + " --target_return {target} --seed {seed}"
                        " --out_dir {run_dir} --eval_freq 2000",
        }),
    # IQN against QR-DQN on cartpole-qrdqn's settings (IQN_CARTPOLE; configs/iqn-CartPole-v1.yaml
    # is the same): ddrl alone, sb3-contrib has no IQN.
    "cartpole-iqn": dict(
        target=475, max_steps=100_000, peer="qr_dqn", timeout=1800,
        systems={
            "qr_dqn": ddrl("qr_dqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                      " --learner_threads 1 " + QRDQN_CARTPOLE + " --eval_interval 2000",
            "iqn": ddrl("iqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                   " --learner_threads 1 " + IQN_CARTPOLE + " --eval_interval 2000",
        }),
    # C51 against QR-DQN on cartpole-qrdqn's settings (C51_CARTPOLE; configs/c51-CartPole-v1.yaml
    # is the same): ddrl alone, neither SB3 nor sb3-contrib has C51.
    "cartpole-c51": dict(
        target=475, max_steps=100_000, peer="qr_dqn", timeout=1800,
        systems={
            "qr_dqn": ddrl("qr_dqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                      " --learner_threads 1 " + QRDQN_CARTPOLE + " --eval_interval 2000",
            "c51": ddrl("c51", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                   " --learner_threads 1 " + C51_CARTPOLE + " --eval_interval 2000",
        }),
    # Noisy networks against epsilon-greedy on cartpole-qrdqn's settings (ddrl alone: SB3 has no
    # noisy layers): --exploration noisy (sigma_0 0.5; the epsilon flags then unused) against
    # RL-Zoo's epsilon schedule; the same networks, learning rate, cadence and budget.
    "cartpole-qrdqn-noisy": dict(
        target=475, max_steps=100_000, peer="epsilon", timeout=1200,
        systems={
            "epsilon": ddrl("qr_dqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                       " --learner_threads 1 " + QRDQN_CARTPOLE + " --eval_interval 2000",
            "noisy": ddrl("qr_dqn", "dqn_agent") + " --gym_id CartPole-v1 --num_workers 0"
                     " --learner_threads 1 " + QRDQN_CARTPOLE.replace("--exploration linear",
                                                                     "--exploration noisy")
                     + " --eval_interval 2000",
        }),
    # The same on LunarLander-v3 with RL-Zoo's LunarLander entry (DQN_LUNAR), 200k steps (RL-Zoo:
    # 100k), evaluations every 5,000 env steps.
    "lunar-dqn": dict(
        target=200, max_steps=200_000, peer="sb3-zoo", timeout=3600,
        systems={
            "ddrl-0workers": DDRL_DQN + " --gym_id LunarLander-v3 --num_workers 0 --learner_threads 1 "
                             + DQN_LUNAR + " --eval_interval 5000",
            "ddrl-2workers": DDRL_DQN + " --gym_id LunarLander-v3 --num_workers 2 --learner_threads 1 "
                             + DQN_LUNAR + " --eval_interval 5000",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --env LunarLander-v3 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                       " --eval_freq 5000",
            "sb3-ddrl": "{python} benchmarks/sb3_dqn.py --env LunarLander-v3 --hyperparams ddrl --num_workers 0 "
                        + DQN_LUNAR + " --target_return {target} --seed {seed} --out_dir {run_dir}"
                        " --eval_freq 5000",
        }),
    # Rainbow against DQN on lunar-dqn's settings (RAINBOW_LUNAR: DQN_LUNAR with Rainbow's six
    # parts), and RL-Zoo's SB3 DQN as the reference a user would pick; SB3 has no Rainbow.
    "lunar-rainbow": dict(
        target=200, max_steps=200_000, peer="dqn", timeout=3600,
        systems={
            "dqn": DDRL_DQN + " --gym_id LunarLander-v3 --num_workers 0 --learner_threads 1 "
                   + DQN_LUNAR + " --eval_interval 5000",
            "rainbow": ddrl("c51", "dqn_agent") + " --gym_id LunarLander-v3 --num_workers 0"
                       " --learner_threads 1 " + RAINBOW_LUNAR + " --eval_interval 5000",
            "sb3-zoo": "{python} benchmarks/sb3_dqn.py --env LunarLander-v3 --hyperparams zoo"
                       " --target_return {target} --seed {seed} --out_dir {run_dir} --max_steps {max_steps}"
                       " --eval_freq 5000",
        }),
    # PPO alone against PPO with Random Network Distillation's novelty bonus (models/ppo_rnd.py,
    # the paper's coefficients), the same settings (DEEP_SEA); no peer library here has RND for
    # PPO. The deep sea is deterministic: one deterministic evaluation episode is its return.
    "deepsea-rnd": dict(
        target=0.9, max_steps=300_000, peer="ppo", timeout=1800,
        systems={
            "ppo": DDRL + " " + DEEP_SEA,
            "ppo_rnd": ddrl("ppo_rnd") + " " + DEEP_SEA,
        }),
    # Noisy networks against epsilon-greedy where exploration is the whole task: DQN's defaults
    # (--config none) on the 10 x 10 deep sea, one process, one learner thread, 60k env steps.
    "deepsea-dqn": dict(
        target=0.9, max_steps=60_000, peer="dqn-epsilon", timeout=900,
        systems={
            "dqn-epsilon": DDRL_DQN + " --config none " + DEEP_SEA_DQN,
            "dqn-noisy": DDRL_DQN + " --config none --exploration noisy " + DEEP_SEA_DQN,
        }),
    # DQN on ALE/Breakout-v5 for 1M frames (250k agent steps), as breakout-ppo: ddrl in one process
    # with RL-Zoo's Atari entry (DQN_ATARI), both cores on the update; sb3: SB3's DQN given the same
    # flags (sb3_dqn.py --hyperparams ddrl) on ddrl's own env chain, 2 torch threads. Both play 5
    # whole games every 25k agent steps. No target. 5.6 GB of replay in each.
    "breakout-dqn": dict(
        target=None, max_steps=250_000, peer="sb3", timeout=5400,
        systems={
            "ddrl-0workers": DDRL_DQN + " --gym_id ALE/Breakout-v5 --num_workers 0 --torch_threads 2"
                             " --learner_threads 2 " + DQN_ATARI + " --eval_interval 25000 --eval_episodes 5",
            "sb3": "{python} benchmarks/sb3_dqn.py --env ALE/Breakout-v5 --hyperparams ddrl --num_workers 0 "
                   + DQN_ATARI + " --seed {seed} --out_dir {run_dir} --eval_freq 25000 --eval_episodes 5"
                   " --torch_threads 2",
        }),
}


def run_one(cmd, run_dir, timeout):
    """Run one command in its own process group; on timeout kill the whole group (Ray spawns children)."""
    shutil.rmtree(run_dir, ignore_errors=True)  # never read a stale summary.json
    load = os.getloadavg()[0]  # other work on the same cores skews wall times: keep it on record
    if load > 0.5:
        print(f"    warning: load average {load:.2f} before this run; timings may be contended", flush=True)
    os.makedirs(run_dir)
    t0 = time.time()
    with open(os.path.join(run_dir, "stdout.log"), "w") as out, open(os.path.join(run_dir, "stderr.log"), "w") as err:
        proc = subprocess.Popen(shlex.split(cmd), cwd=REPO, stdout=out, stderr=err, start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
        wall = time.time() - t0
        end_process_group(proc)  # also sweeps up leftovers of a finished run
    rec = dict(returncode=rc, timed_out=timed_out, process_wall_s=wall, load_before=load, summary=None)
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            rec["summary"] = json.load(f)
    except (OSError, ValueError) as e:
        rec["error"] = f"no summary.json: {e}"
    if rc not in (0, None):
        with open(os.path.join(run_dir, "stderr.log")) as f:
            rec["stderr_tail"] = f.read()[-2000:]
    s = rec["summary"]
    # A run that timed out or failed counts as not reaching the target, whatever it wrote.
    rec["reached"] = bool(s and s.get("target_reached") and rc == 0 and not timed_out)
    return rec


def read_curve(run_dir):
    """(wall_time_s, eval_return) points from eval.csv (sb3) or metrics.csv (ddrl; empty cells skipped)."""
    for name in ("eval.csv", "metrics.csv"):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                return [(float(r["wall_time_s"]), float(r["eval_return"]))
                        for r in csv.DictReader(f) if r.get("eval_return") not in (None, "")]
    return []


def stats(values):
    """Median and spread where failed runs count as never reaching the target (inf)."""
    if not values:
        return None
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def aggregate(records, systems, peer):
    agg = {}
    for name in systems:
        runs = [r for r in records if r["system"] == name]
        agg[name] = dict(
            reached=sum(r["reached"] for r in runs), total=len(runs),
            time_to_target_s=stats([r["summary"]["time_to_target_s"] if r["reached"] else math.inf for r in runs]),
            steps_to_target=stats([r["summary"]["steps_to_target"] if r["reached"] else math.inf for r in runs]),
            process_wall_s=stats([r["process_wall_s"] for r in runs]),
            last_eval_return=stats([r["curve"][-1][1] for r in runs if r.get("curve")]))
    for a in agg.values():  # ratio of medians against the peer (> 1: slower / more steps than the peer)
        p = agg.get(peer)
        for key in ("time_to_target_s", "steps_to_target"):
            ok = p and a[key] and p[key] and math.isfinite(a[key]["median"]) and math.isfinite(p[key]["median"])
            a[key + "_ratio_vs_peer"] = a[key]["median"] / p[key]["median"] if ok else None
    return agg


def fmt(x, nd=1):
    return "∞" if x is None or x == math.inf else f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}"


def markdown(suite, cfg, agg, commands, peer):
    goal = (f"target return {cfg['target']}; failures count as ∞" if cfg["target"] is not None
            else f"no target: every run goes {cfg['max_steps']:,} env steps")
    lines = [f"Suite `{suite}`, {goal}; median [min, max]; ratios are medians against `{peer}`.", "",
             "| system | reached | time to target (s) | env steps to target | time ratio | steps ratio "
             "| last eval return | whole process (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(d, nd):
        return f"{fmt(d['median'], nd)} [{fmt(d['min'], nd)}, {fmt(d['max'], nd)}]" if d else "—"

    def ratio(x):
        return f"{x:.2f}" if x is not None else "—"

    for name, a in agg.items():
        t, s, w = a["time_to_target_s"], a["steps_to_target"], a["process_wall_s"]
        lines.append(f"| {name} | {a['reached']}/{a['total']} | {cell(t, 1)} | {cell(s, 0)} | "
                     f"{ratio(a['time_to_target_s_ratio_vs_peer'])} | {ratio(a['steps_to_target_ratio_vs_peer'])} | "
                     f"{cell(a.get('last_eval_return'), 1)} | {cell(w, 1)} |")
    lines += ["", "Commands (run from the repo root):", ""] + [f"- `{n}`: `{c}`" for n, c in commands.items()]
    return "\n".join(lines)


BOOTSTRAP = dict(reps=2000, confidence=0.95, seed=0)  # the intervals of interval_estimates()


def run_scores(run):
    """(last eval return, best eval return, time to target) of one run record. The returns come
    from its eval curve, as the table's last eval return does (a run stopped before writing
    summary.json has only that), else from its summary, else None; the time is inf unless the
    run reached the target."""
    returns = [r for _, r in run.get("curve") or []]
    s = run.get("summary") or {}
    last = returns[-1] if returns else s.get("last_eval_return")
    best = max(returns) if returns else s.get("best_eval_return")
    return last, best, s["time_to_target_s"] if run["reached"] else math.inf


def system_scores(records, name):
    """A system's scores across its seeds, one list per measure (one task: a suite is one env;
    a suite over several envs would make these [seeds, envs] matrices). Runs without an eval
    return are left out of the returns; every run counts for the time."""
    scores = [run_scores(r) for r in records if r["system"] == name]
    return dict(last_eval_return=[s[0] for s in scores if s[0] is not None],
                best_eval_return=[s[1] for s in scores if s[1] is not None],
                time_to_target_s=[s[2] for s in scores])


def iqm_with_ci(values):
    """The IQM of a system's runs with its interval, None when it has none."""
    return dict(iqm=iqm(values), ci=list(stratified_bootstrap_ci(values, iqm, **BOOTSTRAP))) if values else None


def improvement(x, y, higher_is_better):
    """P(a run of x beats a run of y) with its interval, None when either has no runs."""
    if not x or not y:
        return None
    ci = probability_of_improvement_ci(x, y, higher_is_better, **BOOTSTRAP)
    return dict(p=probability_of_improvement(x, y, higher_is_better), ci=list(ci))


def interval_estimates(records, systems, peer, target):
    """rliable's estimates per system across its seeds: the IQM of the last and best eval return
    and of the time to target (a run that did not reach counts as inf; none without a target),
    each with its stratified-bootstrap interval, and the probability of improvement over the peer
    on the last eval return (higher is better) and on the time to target (lower is better)."""
    scores = {name: system_scores(records, name) for name in systems}
    peer_scores = scores.get(peer)
    out = {}
    for name, s in scores.items():
        vs_peer = peer_scores is not None and name != peer
        out[name] = dict(
            runs=len(s["time_to_target_s"]),
            last_eval_return=iqm_with_ci(s["last_eval_return"]),
            best_eval_return=iqm_with_ci(s["best_eval_return"]),
            time_to_target_s=iqm_with_ci(s["time_to_target_s"]) if target is not None else None,
            p_last_eval_return_above_peer=improvement(
                s["last_eval_return"], peer_scores["last_eval_return"], True) if vs_peer else None,
            p_time_to_target_below_peer=improvement(
                s["time_to_target_s"], peer_scores["time_to_target_s"], False)
            if vs_peer and target is not None else None)
    return dict(BOOTSTRAP, systems=out)


def interval_markdown(estimates, peer):
    """The second table: interval_estimates() as IQM [95% CI] and P [95% CI]."""
    lines = [f"Across seeds, rliable's estimators (Agarwal et al. 2021; ddrl/stats.py): IQM = mean "
             f"of the middle half of the runs (all of them under 4 runs) [95% CI, stratified bootstrap, "
             f"{estimates['reps']:,} resamples]; a run that did not reach the target counts as an infinite "
             f"time (inf); P = probability that a run of the system beats a run of `{peer}` (ties count "
             f"half) [95% CI].", "",
             f"| system | runs | IQM last eval return | IQM best eval return | IQM time to target (s) "
             f"| P(last eval return > `{peer}`) | P(time to target < `{peer}`) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]

    def cell(d, key, nd):
        return f"{d[key]:,.{nd}f} [{d['ci'][0]:,.{nd}f}, {d['ci'][1]:,.{nd}f}]" if d else "—"

    for name, e in estimates["systems"].items():
        lines.append(f"| {name} | {e['runs']} | {cell(e['last_eval_return'], 'iqm', 1)} | "
                     f"{cell(e['best_eval_return'], 'iqm', 1)} | {cell(e['time_to_target_s'], 'iqm', 1)} | "
                     f"{cell(e['p_last_eval_return_above_peer'], 'p', 2)} | "
                     f"{cell(e['p_time_to_target_below_peer'], 'p', 2)} |")
    return "\n".join(lines)


def plot_profiles(path, title, target, records, systems):
    """Performance profiles with their 95% stratified-bootstrap bands, one line per system: the
    fraction of a system's runs whose last eval return exceeds each threshold tau and, for a
    suite with a target, the fraction that reached the target within t seconds (a run that never
    did counts as infinitely late: its curve stays below 1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    scores = {name: system_scores(records, name) for name in systems}
    panels = [("last_eval_return", True)] + ([("time_to_target_s", False)] if target is not None else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 5), squeeze=False)
    for ax, (measure, higher_is_better) in zip(axes[0], panels):
        values = {name: scores[name][measure] for name in systems}
        pooled = [v for vs in values.values() for v in vs if np.isfinite(v)]
        if pooled:
            pad = 0.05 * (max(pooled) - min(pooled)) or 1.0
            low = min(pooled) - pad if higher_is_better else 0.0
            taus = np.linspace(low, max(pooled) + pad, 401)
            for i, (name, vs) in enumerate(values.items()):
                if vs:
                    def profile(m, taus=taus, higher=higher_is_better):
                        return performance_profile(m, taus, higher)
                    lo, hi = stratified_bootstrap_ci(vs, profile, **BOOTSTRAP)
                    ax.plot(taus, profile(vs), color=f"C{i}", drawstyle="steps-post",
                            label=f"{name} ({len(vs)} runs)")
                    ax.fill_between(taus, lo, hi, color=f"C{i}", alpha=0.2, step="post")
        if higher_is_better:
            if target is not None:
                ax.axvline(target, color="k", ls="--", lw=1, label=f"target {target}")
            ax.set(xlabel="last eval return τ", ylabel="fraction of runs with last eval return > τ",
                   title=f"{title}: last eval return")
        else:
            ax.set(xlabel="wall time from process start t (s)",
                   ylabel=f"fraction of runs that reached {target} before t",
                   title=f"{title}: time to target")
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    fig.suptitle("performance profiles, 95% stratified-bootstrap bands")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def report_saved(path, results_dir):
    """The interval estimates of a suite JSON written before, from the runs it recorded (their
    run directories need not exist): print the table, write <name>-profile.png into results_dir;
    the JSON itself is left as it is."""
    with open(path) as f:
        saved = json.load(f)
    systems = [n for n in saved["commands"] if any(r["system"] == n for r in saved["runs"])]
    estimates = interval_estimates(saved["runs"], systems, saved["peer"], saved["target"])
    name = os.path.splitext(os.path.basename(path))[0]
    os.makedirs(results_dir, exist_ok=True)
    profile = os.path.join(results_dir, name + "-profile.png")
    plot_profiles(profile, name, saved["target"], saved["runs"], systems)
    print(interval_markdown(estimates, saved["peer"]) + f"\n\nWrote {profile}")
    return estimates


def plot(path, suite, cfg, records, systems):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, name in enumerate(systems):
        colour, labelled = f"C{i}", False
        for r in records:
            pts = r["curve"] if r["system"] == name else []
            if pts:
                ax.plot(*zip(*pts), color=colour, alpha=0.7, marker=".", label=None if labelled else name)
                labelled = True
    if cfg["target"] is not None:
        ax.axhline(cfg["target"], color="k", ls="--", lw=1, label=f"target {cfg['target']}")
    ax.set(xlabel="wall time from process start (s)", ylabel="eval return (mean of deterministic episodes)",
           title=f"{suite}: eval return against wall time, all seeds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def machine_info():
    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), None) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    return dict(nproc=os.cpu_count(), cpu=cpu, platform=platform.platform(), python=platform.python_version(),
                torch=version("torch"), ray=version("ray"), gymnasium=version("gymnasium"),
                sb3=version("stable-baselines3"), numpy=version("numpy"))


def without_inf(o):
    """inf is not JSON: failed runs appear as null."""
    if isinstance(o, dict):
        return {k: without_inf(v) for k, v in o.items()}
    if isinstance(o, list):
        return [without_inf(v) for v in o]
    return None if o == math.inf else o


def finished_run(run_dir, cmd):
    """The record of a run that finished with this very command, or None."""
    try:
        with open(os.path.join(run_dir, "harness.json")) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    return rec if rec.get("cmd") == cmd else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="cartpole", choices=sorted(SUITES))
    p.add_argument("--systems", nargs="+", default=None, help="subset of the suite's systems (default: all)")
    p.add_argument("--system", action="append", default=[], metavar="NAME=COMMAND",
                   help="add an ad-hoc system to this invocation (same placeholders); repeatable")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per run (default: the suite's, else 600); a timeout counts as not reached")
    p.add_argument("--target", type=float, default=None, help="override the suite's target return")
    p.add_argument("--max_steps", type=int, default=None, help="override the suite's max env steps")
    p.add_argument("--results_dir", default=os.path.join(REPO, "benchmarks", "results"))
    p.add_argument("--report_only", action="store_true",
                   help="run nothing: report the finished runs (harness.json) and, as not reached, "
                        "runs that were started but never finished (their curve so far)")
    p.add_argument("--from_json", default=None, metavar="SUITE_JSON",
                   help="run nothing: the interval estimates (second table, profile plot into "
                        "--results_dir) of a suite JSON written before, from the runs it recorded")
    p.add_argument("--resume", action="store_true",
                   help="reuse the runs already finished with the same command (their run_dir holds "
                        "harness.json), e.g. after an interrupted multi-hour suite")
    args = p.parse_args()
    if args.from_json:
        report_saved(args.from_json, args.results_dir)
        return

    cfg = dict(SUITES[args.suite])
    if args.target is not None:
        cfg["target"] = args.target
    if args.max_steps is not None:
        cfg["max_steps"] = args.max_steps
    timeout = args.timeout if args.timeout is not None else cfg.get("timeout", 600)
    systems = dict(cfg["systems"])
    for spec in args.system:
        name, cmd = spec.split("=", 1)
        systems[name] = cmd
    if args.systems:  # keep the named suite systems plus any ad-hoc ones, in table order
        unknown = set(args.systems) - set(systems)
        if unknown:
            p.error(f"unknown systems {sorted(unknown)}; suite {args.suite} has {list(systems)}")
        systems = {n: c for n, c in systems.items() if n in args.systems or n not in cfg["systems"]}
    target = cfg["target"]  # None: no target (ddrl's --target_return takes "None" as none)
    if target is not None and float(target).is_integer():
        target = int(target)
    fill = dict(python=sys.executable, target=target, max_steps=cfg["max_steps"])

    records = []
    for seed in args.seeds:  # alternate systems within each seed, so drifts in machine load hit all alike
        for name, template in systems.items():
            run_dir = os.path.join(args.results_dir, args.suite, name, f"seed{seed}")
            cmd = template.format(seed=seed, run_dir=run_dir, **fill)
            print(f"[{args.suite}] {name} seed {seed}: {cmd}", flush=True)
            rec = finished_run(run_dir, cmd) if args.resume or args.report_only else None
            if rec is None and args.report_only:
                if not os.path.isdir(run_dir):
                    continue
                rec = dict(system=name, seed=seed, cmd=cmd, run_dir=run_dir, returncode=None,
                           timed_out=False, unfinished=True, reached=False, summary=None,
                           process_wall_s=max((t for t, _ in read_curve(run_dir)), default=0.0),
                           curve=read_curve(run_dir))
                print(f"    unfinished: stopped before the end, counted as not reached "
                      f"(last evaluation at {rec['process_wall_s']:.0f} s)", flush=True)
            elif rec is not None:
                print("    (finished before: reused)", flush=True)
            else:
                rec = dict(system=name, seed=seed, cmd=cmd, run_dir=run_dir, **run_one(cmd, run_dir, timeout))
                rec["curve"] = read_curve(run_dir)
                with open(os.path.join(run_dir, "harness.json"), "w") as f:
                    json.dump(without_inf(rec), f)
            s = rec["summary"] or {}
            print(f"    reached={rec['reached']} time_to_target_s={s.get('time_to_target_s')} "
                  f"steps_to_target={s.get('steps_to_target')} process_wall_s={rec['process_wall_s']:.1f}"
                  + (" TIMEOUT" if rec["timed_out"] else "") + (f" rc={rec['returncode']}" if rec["returncode"] else ""),
                  flush=True)
            records.append(rec)

    agg = aggregate(records, systems, cfg["peer"])
    commands = {n: t.format(seed="{seed}", run_dir="{run_dir}", **fill) for n, t in systems.items()}
    table = markdown(args.suite, cfg, agg, commands, cfg["peer"])
    estimates = interval_estimates(records, systems, cfg["peer"], cfg["target"])
    os.makedirs(args.results_dir, exist_ok=True)
    out = os.path.join(args.results_dir, args.suite)
    with open(out + ".json", "w") as f:  # inf is not JSON: failed runs appear as null there
        json.dump(without_inf(dict(suite=args.suite, target=cfg["target"], max_steps=cfg["max_steps"], peer=cfg["peer"],
                             seeds=args.seeds, timeout_s=timeout, harness_cmd=" ".join(sys.argv),
                             commands=commands, machine=machine_info(), aggregates=agg, runs=records,
                             markdown=table, interval_estimates=estimates)), f, indent=1)
    plot(out + ".png", args.suite, cfg, records, systems)
    plot_profiles(out + "-profile.png", args.suite, cfg["target"], records, systems)
    print("\n" + table + "\n\n" + interval_markdown(estimates, cfg["peer"])
          + f"\n\nWrote {out}.json, {out}.png and {out}-profile.png")


if __name__ == "__main__":
    main()
