"""Figures of the attention model: theory over finite-d simulation."""

from __future__ import annotations

from pathlib import Path


def finish_figure(fig, path, title: str, *, fontsize: float = 9, dpi: int = 120) -> Path:
    """Title ``fig``, lay it out, write it atomically to ``path`` and close it."""
    import matplotlib.pyplot as plt

    from theory._util import atomic_savefig

    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    out = atomic_savefig(fig, path, dpi=dpi)
    plt.close(fig)
    return Path(out)
