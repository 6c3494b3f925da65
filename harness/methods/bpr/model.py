"""BPR's model: DPR's two encoders (:class:`harness.methods.dpr.BiEncoder`, saved and loaded as
DPR's) plus the hash layer ``tanh(β·e)`` of training, and the loss ``L_cand + L_rerank``."""
from __future__ import annotations

import math


def beta(gamma: float, step: int) -> float:
    """The hash layer's scale after ``step`` finished training steps: sqrt(γ·step + 1) (§3.2)."""
    return math.sqrt(gamma * step + 1.0)


def bpr_loss(eq, ep, step: int, *, gamma: float, cand_loss: str = "ranking", margin: float = 2.0,
             reduction: str = "sum"):
    """L_cand + L_rerank for questions ``eq`` [B, d] and passages ``ep`` [P, d]; passage i is the
    positive of question i (P >= B: in-batch positives, then hard negatives). Returns (loss, parts)."""
    import torch
    import torch.nn.functional as F

    b = beta(gamma, step)
    hq, hp = torch.tanh(b * eq), torch.tanh(b * ep)
    n = eq.shape[0]
    target = torch.arange(n, device=eq.device)
    rerank = F.cross_entropy(eq @ hp.T, target)
    scores = hq @ hp.T
    if cand_loss == "ce":
        cand = F.cross_entropy(scores, target)
    else:
        pos = scores.gather(1, target[:, None])
        neg_mask = torch.ones_like(scores, dtype=torch.bool)
        neg_mask[target, target] = False
        hinge = (margin - (pos - scores)).clamp(min=0.0)[neg_mask].view(n, -1)
        cand = hinge.sum(1).mean() if reduction == "sum" else hinge.mean()
    return cand + rerank, {"cand": float(cand.detach()), "rerank": float(rerank.detach()), "beta": b}
