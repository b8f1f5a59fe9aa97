"""V-trace (Espeholt et al. 2018, IMPALA, arXiv:1802.01561, section 4): value targets and
policy-gradient advantages for data sampled by an older policy mu than the one learning, pi.

Time-major tensors [T, N] (N: sequences, e.g. a fragment's env columns). With the importance
ratios rho_t = pi(a_t|x_t) / mu(a_t|x_t), their truncations rho-bar and c-bar:

    delta_t   = min(rho-bar, rho_t) * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
    v_t - V(x_t) = delta_t + gamma * lambda * min(c-bar, rho_t) * (v_{t+1} - V(x_{t+1}))
    A_t       = min(pg-rho-bar, rho_t) * (r_t + gamma_t * v_{t+1} - V(x_t))

where ``gamma_t`` is gamma, or 0 when step t terminated its episode (a terminal state is worth
0), and the recursion stops at every episode end, terminated or truncated: at a truncation
V(x_{t+1}) is the value of the real final observation (``next_values``), not the next episode's
first (Pardo et al. 2018). Past the sequence's last step v = V (the bootstrap value), as in
the paper. With rho_t = 1 everywhere (on-policy data) and lambda = 1, v_t is the n-step
bootstrapped return and A_t its advantage, what PPO's GAE(1) gives.
"""
import torch


def vtrace(log_rhos, rewards, values, next_values, terminated, ended, gamma, rho_bar=1.0,
           c_bar=1.0, pg_rho_bar=None, lam=1.0):
    """(v-trace targets ``vs``, policy-gradient advantages), each [T, N], without gradients.

    ``log_rhos``: log pi(a_t|x_t) - log mu(a_t|x_t); ``values``: V(x_t); ``next_values``:
    V of the state after step t in the same episode (V(x_{t+1}) while it goes on, the final
    observation's value where step t was truncated, anything where it terminated);
    ``terminated``, ``ended`` (terminated or truncated): bool [T, N]. ``pg_rho_bar``: the
    truncation of the ratio in the advantage (None: ``rho_bar``, as the paper)."""
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos.clamp(max=rho_bar)
        cs = lam * rhos.clamp(max=c_bar)
        discounts = gamma * (~terminated).to(values.dtype)
        goes_on = (~ended).to(values.dtype)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        vs_minus_values = torch.empty_like(values)
        running = torch.zeros_like(values[0])
        for t in reversed(range(values.shape[0])):
            running = deltas[t] + gamma * goes_on[t] * cs[t] * running
            vs_minus_values[t] = running
        vs = values + vs_minus_values
        # v_{t+1}: the next step's target while the episode goes on inside the sequence; the
        # bootstrap value at its end and at a truncation (terminated: multiplied by 0 anyway)
        next_vs = next_values.clone()
        inside = ~ended[:-1]
        next_vs[:-1] = torch.where(inside, vs[1:], next_values[:-1])
        pg_rhos = rhos.clamp(max=rho_bar if pg_rho_bar is None else pg_rho_bar)
        advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return vs, advantages
