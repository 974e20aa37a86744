"""The model of the histogram task: one dot-product attention layer, LayerNorm and a token-wise
MLP, with its hand-written backward pass (docs/histogram.md §2).

Model dimension ``D = 64``, everything vectorised over the batch:

* token embedding 15 -> 64 restricted to dims 0-31 (parameter ``tok``, shape (15, 32)) plus a
  learned positional embedding 10 -> 64 restricted to dims 32-63 (parameter ``pos``, (10, 32));
  their sum is the concatenation ``x_i = [tok[x_i], pos[i]]``, shape (B, L, 64);
* one dot-product attention layer ``A = softmax((x F W_Q)(x F W_K)^T / sqrt(64))``,
  ``h = A x W_V`` with ``W_Q, W_K, W_V`` (64, 64), no biases.  ``F`` is a diagonal 0/1 mask seen
  by queries and keys only (values see all 64 dims): ``semantic`` keeps dims 0-31 (tokens),
  ``positional`` keeps dims 32-63 (positions), ``both`` is the identity.  There is no causal
  mask: counting needs every position to see the whole sequence;
* LayerNorm over the 64 features (learnable gain ``ln_g`` and bias ``ln_b``, eps 1e-5),
  no residual connection;
* token-wise MLP 64 -> 128 (ReLU) -> 11 logits (``W1, b1, W2, b2``);
* loss: cross-entropy averaged over all B * L positions.

The parameters live in ONE flat vector ``theta`` (float32 for training, float64 for gradient
checks); :func:`unpack` returns named views.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from theory.histogram.data import L, T
from theory.rng import RNGLike, as_rng

D = 64  # model dimension
HALF = 32  # dims 0-31 tokens, 32-63 positions
HIDDEN = 128
N_CLASSES = 11
LN_EPS = 1e-5
VARIANTS = ("semantic", "positional", "both")

PARAM_SHAPES: dict[str, tuple[int, ...]] = {
    "tok": (T, HALF),
    "pos": (L, HALF),
    "Wq": (D, D),
    "Wk": (D, D),
    "Wv": (D, D),
    "ln_g": (D,),
    "ln_b": (D,),
    "W1": (D, HIDDEN),
    "b1": (HIDDEN,),
    "W2": (HIDDEN, N_CLASSES),
    "b2": (N_CLASSES,),
}
_OFFSETS = {}
_o = 0
for _name, _shape in PARAM_SHAPES.items():
    _n = int(np.prod(_shape))
    _OFFSETS[_name] = (_o, _o + _n)
    _o += _n
N_PARAMS = _o


def unpack(theta: np.ndarray) -> dict[str, np.ndarray]:
    """Named views (no copies) into the flat parameter vector ``theta`` (N_PARAMS,)."""
    if theta.shape != (N_PARAMS,):
        raise ValueError(f"theta must have shape ({N_PARAMS},), got {theta.shape}")
    return {k: theta[a:b].reshape(PARAM_SHAPES[k]) for k, (a, b) in _OFFSETS.items()}


def block_slice(name: str) -> slice:
    a, b = _OFFSETS[name]
    return slice(a, b)


def init_params(rng: RNGLike, dtype=np.float32) -> np.ndarray:
    """PyTorch-style initialisation: embeddings N(0, 1); weights and biases of a layer with
    fan-in ``n`` uniform on (-1/sqrt(n), 1/sqrt(n)); LayerNorm gain 1, bias 0."""
    gen = as_rng(rng)
    theta = np.zeros(N_PARAMS, dtype=np.float64)
    P = unpack(theta)
    P["tok"][:] = gen.standard_normal(P["tok"].shape)
    P["pos"][:] = gen.standard_normal(P["pos"].shape)
    for name, fan_in in (
        ("Wq", D),
        ("Wk", D),
        ("Wv", D),
        ("W1", D),
        ("b1", D),
        ("W2", HIDDEN),
        ("b2", HIDDEN),
    ):
        bound = 1 / np.sqrt(fan_in)
        P[name][:] = gen.uniform(-bound, bound, P[name].shape)
    P["ln_g"][:] = 1.0
    return theta.astype(dtype)


def qk_mask(variant: str) -> np.ndarray:
    """Diagonal of the query/key mask F, shape (64,): 1 = dimension seen by queries and keys."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    f = np.zeros(D)
    if variant in ("semantic", "both"):
        f[:HALF] = 1
    if variant in ("positional", "both"):
        f[HALF:] = 1
    return f


def _forward(theta, tokens, f):
    """Forward pass; returns logits (B*L, 11) and the cache for the backward pass."""
    P = unpack(theta)
    dt = theta.dtype
    B = tokens.shape[0]
    x = np.empty((B, L, D), dtype=dt)
    x[:, :, :HALF] = P["tok"][tokens]
    x[:, :, HALF:] = P["pos"]
    x2 = x.reshape(B * L, D)
    xf2 = x2 * f
    q = (xf2 @ P["Wq"]).reshape(B, L, D)
    k = (xf2 @ P["Wk"]).reshape(B, L, D)
    v = (x2 @ P["Wv"]).reshape(B, L, D)
    s = np.matmul(q, k.transpose(0, 2, 1))
    s *= dt.type(1 / np.sqrt(D))
    s -= s.max(-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(-1, keepdims=True)
    h = np.matmul(a, v).reshape(B * L, D)
    hc = h - h.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((hc * hc).mean(-1, keepdims=True) + dt.type(LN_EPS))
    hn = hc * rstd
    y = hn * P["ln_g"] + P["ln_b"]
    z1 = y @ P["W1"] + P["b1"]
    r = np.maximum(z1, 0)
    logits = r @ P["W2"] + P["b2"]
    cache = (P, tokens, x2, xf2, q, k, v, a, hn, rstd, y, z1, r)
    return logits, cache


def _log_softmax(logits):
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def loss_and_grad(
    theta: np.ndarray,
    tokens: np.ndarray,
    targets: np.ndarray,
    variant: str = "both",
    f: np.ndarray | None = None,
):
    """Mean cross-entropy over the B*L positions and its gradient, a flat vector like theta.

    ``tokens``, ``targets``: (B, L) integer arrays.  Works in the dtype of ``theta``.
    """
    if f is None:
        f = qk_mask(variant)
    dt = theta.dtype
    f = f.astype(dt)
    logits, (P, tokens, x2, xf2, q, k, v, a, hn, rstd, y, z1, r) = _forward(theta, tokens, f)
    B = tokens.shape[0]
    n = B * L
    t = targets.reshape(n)
    logp = _log_softmax(logits)
    loss = -logp[np.arange(n), t].mean()
    grad = np.empty_like(theta)
    G = unpack(grad)
    # cross-entropy -> logits
    dlog = np.exp(logp)
    dlog[np.arange(n), t] -= 1
    dlog /= n
    # MLP
    np.matmul(r.T, dlog, out=G["W2"])
    G["b2"][:] = dlog.sum(0)
    dz1 = dlog @ P["W2"].T
    dz1 *= z1 > 0
    np.matmul(y.T, dz1, out=G["W1"])
    G["b1"][:] = dz1.sum(0)
    dy = dz1 @ P["W1"].T
    # LayerNorm
    G["ln_g"][:] = (dy * hn).sum(0)
    G["ln_b"][:] = dy.sum(0)
    dhn = dy * P["ln_g"]
    dh = rstd * (dhn - dhn.mean(-1, keepdims=True) - hn * (dhn * hn).mean(-1, keepdims=True))
    dh = dh.reshape(B, L, D)
    # attention
    da = np.matmul(dh, v.transpose(0, 2, 1))
    dv = np.matmul(a.transpose(0, 2, 1), dh).reshape(n, D)
    ds = a * (da - (da * a).sum(-1, keepdims=True))
    ds *= dt.type(1 / np.sqrt(D))
    dq = np.matmul(ds, k).reshape(n, D)
    dk = np.matmul(ds.transpose(0, 2, 1), q).reshape(n, D)
    np.matmul(xf2.T, dq, out=G["Wq"])
    np.matmul(xf2.T, dk, out=G["Wk"])
    np.matmul(x2.T, dv, out=G["Wv"])
    dx = (dq @ P["Wq"].T + dk @ P["Wk"].T) * f + dv @ P["Wv"].T
    # embeddings
    onehot = np.eye(T, dtype=dt)[tokens.reshape(n)]
    np.matmul(onehot.T, dx[:, :HALF], out=G["tok"])
    G["pos"][:] = dx[:, HALF:].reshape(B, L, HALF).sum(0)
    return float(loss), grad


def loss_only(theta: np.ndarray, tokens: ArrayLike, targets: ArrayLike, variant: str = "both"):
    f = qk_mask(variant).astype(theta.dtype)
    logits, _ = _forward(theta, tokens, f)
    logp = _log_softmax(logits)
    t = np.asarray(targets).reshape(-1)
    return float(-logp[np.arange(t.size), t].mean())


def predict(
    theta: np.ndarray, tokens: ArrayLike, variant: str = "both", batch_size: int = 512
) -> np.ndarray:
    """Predicted counts, shape (N, L)."""
    tokens = np.atleast_2d(np.asarray(tokens))
    f = qk_mask(variant).astype(theta.dtype)
    out = []
    for s in range(0, len(tokens), batch_size):
        logits, _ = _forward(theta, tokens[s : s + batch_size], f)
        out.append(logits.argmax(-1).reshape(-1, L))
    return np.concatenate(out)


def evaluate(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray, variant: str = "both", batch_size: int = 512
) -> dict:
    """Mean loss, per-token accuracy and per-sequence accuracy on (x, y)."""
    f = qk_mask(variant).astype(theta.dtype)
    tot_loss = 0.0
    correct = 0
    seq_correct = 0
    for s in range(0, len(x), batch_size):
        xb, yb = x[s : s + batch_size], y[s : s + batch_size]
        logits, _ = _forward(theta, xb, f)
        logp = _log_softmax(logits)
        t = yb.reshape(-1)
        tot_loss -= float(logp[np.arange(t.size), t].astype(np.float64).sum())
        ok = (logits.argmax(-1) == t).reshape(-1, L)
        correct += int(ok.sum())
        seq_correct += int(ok.all(-1).sum())
    n = len(x)
    return dict(loss=tot_loss / (n * L), accuracy=correct / (n * L), seq_accuracy=seq_correct / n)


def full_gradient(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray, variant: str = "both", batch_size: int = 1000
) -> np.ndarray:
    """Gradient of the mean cross-entropy over the whole set (x, y), in theta's dtype."""
    f = qk_mask(variant)
    g = np.zeros_like(theta)
    for s in range(0, len(x), batch_size):
        _, gb = loss_and_grad(theta, x[s : s + batch_size], y[s : s + batch_size], f=f)
        g += gb * (len(x[s : s + batch_size]) / len(x))
    return g


def attention(theta: np.ndarray, tokens: ArrayLike, variant: str = "both") -> np.ndarray:
    """Attention matrices softmax(q k^T / 8), shape (N, L, L) (rows = queries, sum to 1)."""
    tokens = np.atleast_2d(np.asarray(tokens))
    f = qk_mask(variant).astype(theta.dtype)
    _, cache = _forward(theta, tokens, f)
    return cache[7]


def embed_restricted(theta: np.ndarray, variant: str) -> np.ndarray:
    """The restricted solution as parameters of the unrestricted (``both``) model: a copy of
    ``theta`` with the rows of W_Q and W_K that the mask F of ``variant`` hid set to zero (they
    never entered the restricted model, so this leaves its function unchanged)."""
    out = np.array(theta, copy=True)
    P = unpack(out)
    hidden = qk_mask(variant) == 0
    P["Wq"][hidden] = 0
    P["Wk"][hidden] = 0
    return out
