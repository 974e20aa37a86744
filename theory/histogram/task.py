"""The histogram (counting) task: one attention layer that learns positionally or semantically.

Spec: ``shared/spec/histogram-task.md`` (Cui et al. 2024, section 2).  Sequences of ``L = 10``
tokens over an alphabet of ``T = 15`` letters (``A`` .. ``O`` = tokens 0 .. 14); the target at
position ``i`` is the count ``#{j : x_j = x_i}`` (it includes ``j = i``, so it lies in 1 .. 10;
the classifier has 11 classes 0 .. 10).

Model (model dimension ``D = 64``), everything vectorised over the batch, hand-written backward:

* token embedding 15 -> 64 restricted to dims 0-31 (parameter ``tok``, shape (15, 32)) plus a
  learned positional embedding 10 -> 64 restricted to dims 32-63 (parameter ``pos``, (10, 32));
  their sum is the concatenation ``x_i = [tok[x_i], pos[i]]``, shape (B, L, 64);
* one dot-product attention layer ``A = softmax((x F W_Q)(x F W_K)^T / sqrt(64))``,
  ``h = A x W_V`` with ``W_Q, W_K, W_V`` (64, 64), no biases.  ``F`` is a diagonal 0/1 mask seen
  by queries and keys only (values see all 64 dims): ``semantic`` keeps dims 0-31 (tokens),
  ``positional`` keeps dims 32-63 (positions), ``both`` is the identity.
  There is NO causal mask: counting needs every position to see the whole sequence, so the
  softmax runs over all ``L`` keys.  "Masked attention" in the issue means the mask ``F``;
* LayerNorm over the 64 features (learnable gain ``ln_g`` and bias ``ln_b``, eps 1e-5),
  no residual connection;
* token-wise MLP 64 -> 128 (ReLU) -> 11 logits (``W1, b1, W2, b2``);
* loss: cross-entropy averaged over all B * L positions.  "Accuracy" is the per-token accuracy
  (fraction of positions whose count is predicted exactly); the per-sequence accuracy (all ten
  counts right) is recorded too.

The parameters live in ONE flat vector ``theta`` (float32 for training, float64 for gradient
checks); :func:`unpack` returns named views.  Optimisers (:class:`Adam`, :class:`SGD`) update the
flat vector in place.  Training (:func:`train`) shuffles with a seed derived from
``(seed, epoch)``, so a run interrupted after epoch k and resumed from its checkpoint retraces
exactly the uninterrupted run.

Chance level: the majority class (count 1) has probability (14/15)^9 = 0.537 per token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from theory._util import atomic_write_bytes
from theory.results import Result
from theory.rng import as_rng

ALPHABET = "ABCDEFGHIJKLMNO"
L = 10  # sequence length
T = 15  # alphabet size
D = 64  # model dimension
HALF = 32  # dims 0-31 tokens, 32-63 positions
HIDDEN = 128
N_CLASSES = 11
LN_EPS = 1e-5
VARIANTS = ("semantic", "positional", "both")
CHANCE_ACCURACY = (14 / 15) ** 9  # majority class (count 1) per token

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


# --------------------------------------------------------------------------------------------
# BLAS threads: the matrices here are tiny (320 x 64); a multi-threaded BLAS on a loaded machine
# makes a training step ~30x slower (measured: 2 epochs of 1400 sequences took 17 s with the
# default OpenBLAS threads under load, 0.45 s with one thread).  Training pins BLAS to one thread.
# --------------------------------------------------------------------------------------------


def _openblas_handles():
    import ctypes
    import glob
    import os

    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for lib in sorted(glob.glob(os.path.join(libdir, "*openblas*.so*"))):
        try:
            cdll = ctypes.CDLL(lib)
        except OSError:
            continue
        for get, set_ in (
            ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
            ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
            ("openblas_get_num_threads", "openblas_set_num_threads"),
        ):
            if hasattr(cdll, get) and hasattr(cdll, set_):
                return getattr(cdll, get), getattr(cdll, set_)
    return None


class blas_threads(contextlib.ContextDecorator):
    """Context manager (or decorator) limiting numpy's bundled OpenBLAS to ``n`` threads (no-op
    if the library is not found or ``n`` is None)."""

    def __init__(self, n: int | None = 1):
        self.n = n
        self.old = None

    def __enter__(self):
        h = _openblas_handles() if self.n is not None else None
        if h is not None:
            get, set_ = h
            self.old = int(get())
            set_(int(self.n))
            self._set = set_
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            self._set(self.old)
        return False


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def encode(text: str) -> np.ndarray:
    """Letters ``A..O`` -> tokens 0..14, shape (len(text),)."""
    text = text.strip().upper()
    bad = [c for c in text if c not in ALPHABET]
    if bad or len(text) != L:
        raise ValueError(f"a sequence must be {L} letters from {ALPHABET}, got {text!r}")
    return np.array([ALPHABET.index(c) for c in text], dtype=np.int64)


def decode(tokens) -> str:
    return "".join(ALPHABET[int(t)] for t in tokens)


def counts(x: np.ndarray) -> np.ndarray:
    """Targets: ``y[n, i] = #{j : x[n, j] == x[n, i]}``, shape (N, L), int64."""
    x = np.asarray(x)
    return (x[:, :, None] == x[:, None, :]).sum(-1).astype(np.int64)


@dataclass(frozen=True)
class HistogramData:
    """Train/validation split: tokens (N, L) int64 and count targets (N, L) int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    n_drawn: int
    n_unique: int
    seed: int

    def subset(self, n_train: int, n_val: int) -> HistogramData:
        return dataclasses.replace(
            self,
            x_train=self.x_train[:n_train],
            y_train=self.y_train[:n_train],
            x_val=self.x_val[:n_val],
            y_val=self.y_val[:n_val],
        )


def dedup_sequences(x: np.ndarray) -> np.ndarray:
    """Remove repeated rows of ``x`` (N, L), keeping first occurrences in their order."""
    _, first = np.unique(x, axis=0, return_index=True)
    return x[np.sort(first)]


def make_data(n_sequences: int = 50_000, rng=0, train_fraction: float = 0.7) -> HistogramData:
    """Draw ``n_sequences`` uniform sequences, remove duplicates, shuffle, split 70/30.

    ``rng`` is an int seed (the spec's "fixed seed"; default 0) or a Generator.
    """
    n_sequences = int(n_sequences)
    if n_sequences < 10:
        raise ValueError(f"n_sequences must be at least 10, got {n_sequences}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
    seed = rng if isinstance(rng, (int, np.integer)) else -1
    gen = as_rng(rng)
    x = gen.integers(0, T, size=(n_sequences, L))
    x = dedup_sequences(x)
    x = x[gen.permutation(len(x))]
    n_train = int(round(train_fraction * len(x)))
    y = counts(x)
    return HistogramData(
        x[:n_train],
        y[:n_train],
        x[n_train:],
        y[n_train:],
        n_drawn=n_sequences,
        n_unique=len(x),
        seed=int(seed),
    )


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------


def unpack(theta: np.ndarray) -> dict[str, np.ndarray]:
    """Named views (no copies) into the flat parameter vector ``theta`` (N_PARAMS,)."""
    if theta.shape != (N_PARAMS,):
        raise ValueError(f"theta must have shape ({N_PARAMS},), got {theta.shape}")
    return {k: theta[a:b].reshape(PARAM_SHAPES[k]) for k, (a, b) in _OFFSETS.items()}


def block_slice(name: str) -> slice:
    a, b = _OFFSETS[name]
    return slice(a, b)


def init_params(rng, dtype=np.float32) -> np.ndarray:
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


# --------------------------------------------------------------------------------------------
# forward / backward
# --------------------------------------------------------------------------------------------


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


def loss_only(theta, tokens, targets, variant="both"):
    f = qk_mask(variant).astype(theta.dtype)
    logits, _ = _forward(theta, tokens, f)
    logp = _log_softmax(logits)
    t = np.asarray(targets).reshape(-1)
    return float(-logp[np.arange(t.size), t].mean())


def predict(theta, tokens, variant="both", batch_size=512) -> np.ndarray:
    """Predicted counts, shape (N, L)."""
    tokens = np.atleast_2d(np.asarray(tokens))
    f = qk_mask(variant).astype(theta.dtype)
    out = []
    for s in range(0, len(tokens), batch_size):
        logits, _ = _forward(theta, tokens[s : s + batch_size], f)
        out.append(logits.argmax(-1).reshape(-1, L))
    return np.concatenate(out)


def evaluate(theta, x, y, variant="both", batch_size=512) -> dict:
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


def full_gradient(theta, x, y, variant="both", batch_size=1000) -> np.ndarray:
    """Gradient of the mean cross-entropy over the whole set (x, y), in theta's dtype."""
    f = qk_mask(variant)
    g = np.zeros_like(theta)
    for s in range(0, len(x), batch_size):
        _, gb = loss_and_grad(theta, x[s : s + batch_size], y[s : s + batch_size], f=f)
        g += gb * (len(x[s : s + batch_size]) / len(x))
    return g


def attention(theta, tokens, variant="both") -> np.ndarray:
    """Attention matrices softmax(q k^T / 8), shape (N, L, L) (rows = queries, sum to 1)."""
    tokens = np.atleast_2d(np.asarray(tokens))
    f = qk_mask(variant).astype(theta.dtype)
    _, cache = _forward(theta, tokens, f)
    return cache[7]


# --------------------------------------------------------------------------------------------
# optimisers (update the flat parameter vector in place)
# --------------------------------------------------------------------------------------------


class Adam:
    """Adam with bias correction (PyTorch convention): lr 1e-3, betas (0.9, 0.98), eps 1e-9."""

    def __init__(self, n, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, dtype=np.float32):
        self.lr, self.b1, self.b2, self.eps = float(lr), float(betas[0]), float(betas[1]), eps
        self.m = np.zeros(n, dtype=dtype)
        self.v = np.zeros(n, dtype=dtype)
        self.t = 0
        self._tmp = np.zeros(n, dtype=dtype)

    def step(self, theta, grad):
        self.t += 1
        m, v, tmp = self.m, self.v, self._tmp
        m *= self.b1
        m += (1 - self.b1) * grad
        v *= self.b2
        np.multiply(grad, grad, out=tmp)
        tmp *= 1 - self.b2
        v += tmp
        c1 = 1 - self.b1**self.t
        c2 = 1 - self.b2**self.t
        # theta -= lr * (m / c1) / (sqrt(v / c2) + eps)
        np.sqrt(v, out=tmp)
        tmp *= 1 / np.sqrt(c2)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= self.lr / c1
        theta -= tmp

    def state(self) -> dict:
        return dict(m=self.m, v=self.v, t=np.int64(self.t))

    def load(self, state):
        self.m[:] = state["m"]
        self.v[:] = state["v"]
        self.t = int(state["t"])


class SGD:
    """Plain SGD: theta -= lr * grad."""

    def __init__(self, n, lr=1e-3, dtype=np.float32):
        self.lr = float(lr)
        self.t = 0

    def step(self, theta, grad):
        self.t += 1
        theta -= self.lr * grad

    def state(self) -> dict:
        return dict(t=np.int64(self.t))

    def load(self, state):
        self.t = int(state["t"])


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------

HISTORY_KEYS = (
    "epoch",
    "train_loss",
    "train_accuracy",
    "train_seq_accuracy",
    "val_loss",
    "val_accuracy",
    "val_seq_accuracy",
    "seconds",
)


@dataclass(frozen=True, kw_only=True)
class HistogramTrainResult(Result):
    """Outcome of :func:`train`.  ``history`` is a dict of per-epoch lists (HISTORY_KEYS);
    ``theta`` the final flat parameters; ``init_theta`` the parameters training started from."""

    variant: str
    epochs: int
    train_accuracy: float
    val_accuracy: float
    train_loss: float
    val_loss: float
    seconds: float
    theta: np.ndarray = field(repr=False, compare=False)
    init_theta: np.ndarray = field(repr=False, compare=False)

    def to_dict(self, *, history: bool = False) -> dict:
        d = super().to_dict(history=history)
        d.pop("theta", None)
        d.pop("init_theta", None)
        return d

    def row(self) -> dict:
        d = super().row()
        d.pop("theta", None)
        d.pop("init_theta", None)
        return d


def _epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), 1, int(epoch)]))


def _theta_digest(theta) -> str:
    return hashlib.sha1(np.ascontiguousarray(theta).tobytes()).hexdigest()[:16]


def checkpoint_path(directory, config: dict) -> Path:
    """File for a run with ``config`` inside ``directory`` (name encodes the key settings)."""
    tag = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return Path(directory) / (
        f"histogram-{config['variant']}-{config['optimizer']}-seed{config['seed']}-"
        f"n{config['n_train']}-{tag}.npz"
    )


def _save_checkpoint(path, config, theta, init_theta, opt, epoch, history):
    buf = io.BytesIO()
    np.savez(
        buf,
        theta=theta,
        init_theta=init_theta,
        epoch=np.int64(epoch),
        config=np.array(json.dumps(config, sort_keys=True)),
        history=np.array(json.dumps(history)),
        **{f"opt_{k}": v for k, v in opt.state().items()},
    )
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    out["config"] = json.loads(str(out["config"]))
    out["history"] = json.loads(str(out["history"]))
    out["epoch"] = int(out["epoch"])
    out["opt"] = {k[4:]: out.pop(k) for k in list(out) if k.startswith("opt_")}
    return out


def train(
    data: HistogramData,
    variant: str = "semantic",
    epochs: int = 200,
    seed=0,
    *,
    optimizer: str = "adam",
    lr: float = 1e-3,
    batch_size: int = 32,
    dtype=np.float32,
    init_theta: np.ndarray | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    callback=None,
    threads: int | None = 1,
) -> HistogramTrainResult:
    """Train the one-layer model on ``data`` for ``epochs`` epochs (total, counting resumed ones).

    seed: int; initialisation from SeedSequence([seed, 0]) (unless ``init_theta`` is given),
    shuffling of epoch e from SeedSequence([seed, 1, e]).
    checkpoint: a directory; after every epoch the state (parameters, optimiser moments, epoch,
    history) is written atomically to ``checkpoint_path(dir, config)``; a later call with the same
    configuration resumes from it (a run that already has >= ``epochs`` epochs is returned as is).
    callback(epoch, history): called after each epoch, after the checkpoint is written (raising
    KeyboardInterrupt there simulates an interruption).
    threads: BLAS threads during training (default 1: fastest for these tiny matrices).
    """
    with blas_threads(threads):
        return _train(
            data,
            variant,
            epochs,
            seed,
            optimizer=optimizer,
            lr=lr,
            batch_size=batch_size,
            dtype=dtype,
            init_theta=init_theta,
            checkpoint=checkpoint,
            progress=progress,
            callback=callback,
        )


def _train(
    data,
    variant,
    epochs,
    seed,
    *,
    optimizer,
    lr,
    batch_size,
    dtype,
    init_theta,
    checkpoint,
    progress,
    callback,
):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    epochs = int(epochs)
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not isinstance(seed, (int, np.integer)):
        raise ValueError("seed must be an integer (it also fixes the shuffling of every epoch)")
    seed = int(seed)
    dtype = np.dtype(dtype)
    if init_theta is None:
        theta0 = init_params(np.random.SeedSequence([seed, 0]), dtype=dtype)
    else:
        theta0 = np.array(init_theta, dtype=dtype)
        unpack(theta0)  # shape check
    n_train = len(data.x_train)
    config = dict(
        variant=variant,
        seed=seed,
        optimizer=optimizer,
        lr=float(lr),
        batch_size=int(batch_size),
        dtype=dtype.name,
        n_train=n_train,
        n_val=len(data.x_val),
        data_seed=data.seed,
        data_digest=_theta_digest(data.x_train[:1000]),
        init=_theta_digest(theta0),
    )
    opt = (
        Adam(N_PARAMS, lr=lr, dtype=dtype)
        if optimizer == "adam"
        else SGD(N_PARAMS, lr=lr, dtype=dtype)
    )
    theta = theta0.copy()
    history = {k: [] for k in HISTORY_KEYS}
    start = 0
    path = None
    if checkpoint is not None:
        path = checkpoint_path(checkpoint, config)
        if path.exists():
            ck = load_checkpoint(path)
            if ck["config"] != config:
                raise ValueError(
                    f"checkpoint {path} was written with different settings; "
                    "remove it or choose another --checkpoint directory"
                )
            theta = ck["theta"].astype(dtype)
            opt.load(ck["opt"])
            history = ck["history"]
            start = ck["epoch"]
    f = qk_mask(variant).astype(dtype)
    xs, ys = data.x_train, data.y_train
    bar = None
    if progress and epochs > start:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=epochs, initial=start, desc=f"histogram {variant}", unit="epoch", leave=False
        )
    try:
        for epoch in range(start, epochs):
            t0 = time.perf_counter()
            perm = _epoch_rng(seed, epoch).permutation(n_train)
            for s in range(0, n_train, batch_size):
                idx = perm[s : s + batch_size]
                _, g = loss_and_grad(theta, xs[idx], ys[idx], f=f)
                opt.step(theta, g)
            if not np.all(np.isfinite(theta)):
                break
            tr = evaluate(theta, xs, ys, variant)
            va = evaluate(theta, data.x_val, data.y_val, variant)
            row = dict(
                epoch=epoch + 1,
                train_loss=tr["loss"],
                train_accuracy=tr["accuracy"],
                train_seq_accuracy=tr["seq_accuracy"],
                val_loss=va["loss"],
                val_accuracy=va["accuracy"],
                val_seq_accuracy=va["seq_accuracy"],
                seconds=time.perf_counter() - t0,
            )
            for k in HISTORY_KEYS:
                history[k].append(row[k])
            if path is not None:
                _save_checkpoint(path, config, theta, theta0, opt, epoch + 1, history)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(val_acc=f"{va['accuracy']:.4f}", loss=f"{tr['loss']:.3g}")
            if callback is not None:
                callback(epoch + 1, history)
    finally:
        if bar is not None:
            bar.close()
    finite = bool(np.all(np.isfinite(theta)))
    tr = evaluate(theta, xs, ys, variant)
    va = evaluate(theta, data.x_val, data.y_val, variant)
    done = len(history["epoch"])
    status = "ok" if finite else "nan"
    msg = "" if finite else f"parameters became non-finite in epoch {done + 1}"
    return HistogramTrainResult(
        status=status,
        message=msg,
        history=history,
        params=dict(config, epochs=epochs),
        metadata=dict(
            method="one-layer attention, hand-written backward, numpy",
            checkpoint=str(path) if path else None,
            n_params=N_PARAMS,
        ),
        variant=variant,
        epochs=done,
        train_accuracy=tr["accuracy"],
        val_accuracy=va["accuracy"],
        train_loss=tr["loss"],
        val_loss=va["loss"],
        seconds=float(np.sum(history["seconds"])),
        theta=theta,
        init_theta=theta0,
    )


# --------------------------------------------------------------------------------------------
# local-minimum (stationarity) test
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True, kw_only=True)
class StationarityResult(Result):
    """Distances (Euclidean norm over ALL parameters) in the local-minimum test.

    distance_frozen_to_retrained: ||theta_retrained - theta_frozen||, theta_frozen = the trained
        restricted model embedded in the unrestricted one;
    distance_init_to_frozen: ||theta_init - theta_frozen||, theta_init = the random initialisation
        the restricted training started from (the scale of a training run);
    distance_perturbation: ||theta_start - theta_frozen|| (the 1e-3 noise);
    hidden_norm_retrained: Frobenius norm of the W_Q, W_K rows the mask had hidden, after
        retraining (0 at the start up to noise): how much the other mechanism grew.
    grad_norm_frozen, grad_norm_hidden_frozen, grad_norm_init: norm of the full-batch gradient
        of the unrestricted training loss at theta_frozen (all parameters / the hidden W_Q, W_K
        rows only) and at theta_init, for scale.
    """

    variant: str
    retrain_epochs: int
    distance_frozen_to_retrained: float
    distance_init_to_frozen: float
    distance_perturbation: float
    hidden_norm_retrained: float
    val_accuracy_frozen: float
    val_accuracy_retrained: float
    grad_norm_frozen: float
    grad_norm_hidden_frozen: float
    grad_norm_init: float
    block_distances: dict = field(default_factory=dict)


@blas_threads(1)
def stationarity(
    trained: HistogramTrainResult,
    data: HistogramData,
    *,
    retrain_epochs: int = 10,
    noise: float = 1e-3,
    lr: float = 1e-3,
    seed=0,
    batch_size: int = 32,
    checkpoint=None,
    progress: bool = True,
) -> StationarityResult:
    """Embed the restricted model ``trained`` in the unrestricted one, perturb every parameter
    by ``noise`` * N(0, 1), retrain the unrestricted model (F = identity) with plain SGD
    (``lr``) for ``retrain_epochs`` epochs, and report how far the parameters move."""
    variant = trained.variant
    if variant == "both":
        raise ValueError(
            "the stationarity test needs a restricted model: train it with "
            "variant 'semantic' or 'positional'"
        )
    frozen = embed_restricted(trained.theta.astype(np.float64), variant)
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), 2]))
    start = frozen + noise * gen.standard_normal(frozen.shape)
    res = train(
        data,
        "both",
        retrain_epochs,
        seed=seed,
        optimizer="sgd",
        lr=lr,
        batch_size=batch_size,
        dtype=trained.theta.dtype,
        init_theta=start,
        checkpoint=checkpoint,
        progress=progress,
    )
    retrained = res.theta.astype(np.float64)
    start = res.init_theta.astype(np.float64)  # what training really started from (dtype)
    init = trained.init_theta.astype(np.float64)
    hidden = qk_mask(variant) == 0
    Pr = unpack(retrained)
    hidden_norm = float(np.sqrt((Pr["Wq"][hidden] ** 2).sum() + (Pr["Wk"][hidden] ** 2).sum()))
    blocks = {
        k: float(np.linalg.norm(retrained[block_slice(k)] - frozen[block_slice(k)]))
        for k in PARAM_SHAPES
    }
    va_frozen = evaluate(frozen.astype(trained.theta.dtype), data.x_val, data.y_val, "both")
    g_frozen = full_gradient(frozen, data.x_train, data.y_train, "both")
    g_init = full_gradient(init, data.x_train, data.y_train, "both")
    Gf = unpack(g_frozen)
    g_hidden = float(np.sqrt((Gf["Wq"][hidden] ** 2).sum() + (Gf["Wk"][hidden] ** 2).sum()))
    return StationarityResult(
        status=res.status,
        message=res.message,
        history=res.history,
        params=dict(
            variant=variant,
            retrain_epochs=retrain_epochs,
            noise=noise,
            lr=lr,
            seed=seed,
            batch_size=batch_size,
            trained_epochs=trained.epochs,
        ),
        metadata=dict(method="embed restricted model, perturb, retrain unrestricted with SGD"),
        variant=variant,
        retrain_epochs=res.epochs,
        distance_frozen_to_retrained=float(np.linalg.norm(retrained - frozen)),
        distance_init_to_frozen=float(np.linalg.norm(init - frozen)),
        distance_perturbation=float(np.linalg.norm(start - frozen)),
        hidden_norm_retrained=hidden_norm,
        val_accuracy_frozen=va_frozen["accuracy"],
        val_accuracy_retrained=res.val_accuracy,
        grad_norm_frozen=float(np.linalg.norm(g_frozen)),
        grad_norm_hidden_frozen=g_hidden,
        grad_norm_init=float(np.linalg.norm(g_init)),
        block_distances=blocks,
    )


# --------------------------------------------------------------------------------------------
# saving trained parameters (small: ~92 kB in float32)
# --------------------------------------------------------------------------------------------


def save_model(path, result: HistogramTrainResult) -> Path:
    """Write the final parameters, settings and history (compressed npz, atomic, ~100 kB).

    The initial parameters are stored only if they are not the seed's default initialisation
    (which :func:`load_model` regenerates)."""
    seed_init = init_params(
        np.random.SeedSequence([int(result.params["seed"]), 0]), dtype=result.init_theta.dtype
    )
    extra = (
        {} if np.array_equal(seed_init, result.init_theta) else {"init_theta": result.init_theta}
    )
    buf = io.BytesIO()
    np.savez_compressed(
        buf, theta=result.theta, summary=np.array(json.dumps(result.to_dict(history=True))), **extra
    )
    return atomic_write_bytes(path, buf.getvalue())


def load_model(path) -> HistogramTrainResult:
    """Read a model written by :func:`save_model`."""
    with np.load(path, allow_pickle=False) as z:
        theta = z["theta"]
        init_theta = z["init_theta"] if "init_theta" in z.files else None
        d = json.loads(str(z["summary"]))
    if init_theta is None:
        init_theta = init_params(
            np.random.SeedSequence([int(d["params"]["seed"]), 0]), dtype=theta.dtype
        )
    fields = {f.name for f in dataclasses.fields(HistogramTrainResult)}
    kw = {k: v for k, v in d.items() if k in fields}
    return HistogramTrainResult(**kw, theta=theta, init_theta=init_theta)
