"""A deliberately naive CapsNet, in the style the popular tutorials use.

Same network and the same maths as ``capsedu.core.CapsNet`` (softmax over the output
capsules, per-example logits), but written the slow way:
- the primary capsules are a Python list of 8 convolutions (one per capsule dimension);
- u_hat stacks 10 copies of the inputs and ``torch.cat``s B copies of W;
- every routing iteration concatenates B copies of c and 1,152 copies of v.
Used only as the baseline of the speed measurements (``benchmarks/train_step.py``,
chapter 8). Do not train with it: it is slow on purpose.
"""
__all__ = ["NaiveCapsNet"]
import torch
import torch.nn.functional as F
from torch import nn


def naive_squash(s, dim=-1):
    n2 = (s**2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)


class NaivePrimaryCaps(nn.Module):
    def __init__(self):
        super().__init__()
        self.capsules = nn.ModuleList([nn.Conv2d(256, 32, 9, 2) for _ in range(8)])

    def forward(self, x):
        u = torch.stack([conv(x) for conv in self.capsules], dim=1)     # (B, 8, 32, 6, 6)
        u = u.permute(0, 2, 3, 4, 1).reshape(x.size(0), 32 * 6 * 6, 8)  # (B, 1152, 8)
        return naive_squash(u)


class NaiveDigitCaps(nn.Module):
    def __init__(self, iterations=3):
        super().__init__()
        self.iterations = iterations
        self.W = nn.Parameter(0.01 * torch.randn(1, 1152, 10, 16, 8))

    def forward(self, x):
        B = x.size(0)
        x = torch.stack([x] * 10, dim=2).unsqueeze(4)                   # (B, 1152, 10, 8, 1)
        W = torch.cat([self.W] * B, dim=0)                              # (B, 1152, 10, 16, 8)
        u_hat = torch.matmul(W, x)                                      # (B, 1152, 10, 16, 1)
        b = torch.zeros(B, 1152, 10, 1, device=x.device)
        for it in range(self.iterations):
            c = F.softmax(b, dim=2).unsqueeze(4)                        # (B, 1152, 10, 1, 1)
            s = (c * u_hat).sum(dim=1, keepdim=True)                    # (B, 1, 10, 16, 1)
            v = naive_squash(s, dim=3)
            if it < self.iterations - 1:
                a = torch.matmul(u_hat.transpose(3, 4), torch.cat([v] * 1152, dim=1))  # (B, 1152, 10, 1, 1)
                b = b + a.squeeze(4)
        return v.squeeze(1).squeeze(-1)                                 # (B, 10, 16)


class NaiveCapsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 256, 9)
        self.primary = NaivePrimaryCaps()
        self.digits = NaiveDigitCaps()
        self.decoder = nn.Sequential(nn.Linear(160, 512), nn.ReLU(), nn.Linear(512, 1024), nn.ReLU(),
                                     nn.Linear(1024, 784), nn.Sigmoid())

    def forward(self, x, labels):
        v = self.digits(self.primary(F.relu(self.conv1(x))))
        lengths = torch.sqrt((v**2).sum(-1) + 1e-8)
        mask = torch.eye(10, device=x.device).index_select(0, labels)
        rec = self.decoder((v * mask.unsqueeze(2)).view(x.size(0), -1)).view(-1, 1, 28, 28)
        return v, lengths, rec
