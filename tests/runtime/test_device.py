"""capsedu.runtime.device: the device and precision choice on hardware we fake, and the modes.

The GPU cases monkeypatch torch's capability query, so they run on any machine; what
they check is the decision, the real GPU run is benchmarks/gpu_check.sh.
"""
import pytest
import torch
from cli_helpers import TINY, subset

import capsedu
import capsedu.runtime.device as dev
from capsedu.core.capsnet import CapsNet
from capsedu.runtime.device import autocast, grad_scaler, hardware, resolve_amp, resolve_device
from capsedu.training.loop import fit, start_run



def fake_gpu(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    # torch's own answer includes emulation (True on a T4): the choice must not rely on it
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)


def fake_cpu_flags(monkeypatch, flags):
    monkeypatch.setattr(dev, "cpuinfo", lambda field: flags if field == "flags" else "Test CPU")


@pytest.mark.parametrize("capability, amp", [((6, 1), "off"), ((7, 0), "fp16"), ((7, 5), "fp16"),
                                             ((8, 0), "bf16"), ((8, 9), "bf16"), ((9, 0), "bf16")])
def test_auto_precision_on_each_gpu_generation(monkeypatch, capability, amp):
    fake_gpu(monkeypatch, capability)
    cuda = resolve_device("auto")
    assert cuda.type == "cuda"
    assert resolve_amp("auto", cuda) == amp
    assert isinstance(grad_scaler(resolve_amp("auto", cuda), "cpu"), torch.amp.GradScaler) == (amp == "fp16")


def test_explicit_bf16_is_refused_where_the_gpu_would_emulate_it(monkeypatch):
    fake_gpu(monkeypatch, (7, 5))
    with pytest.raises(ValueError, match=r"bf16.*7\.5.*fp16"):
        resolve_amp("bf16", "cuda")
    assert resolve_amp("fp16", "cuda") == "fp16" and resolve_amp("off", "cuda") == "off"


@pytest.mark.parametrize("flags, amp", [("fpu sse2 avx2 avx512f avx512_bf16", "bf16"),
                                        ("fpu sse2 avx2 amx_tile amx_bf16", "bf16"),
                                        ("fpu sse2 avx2 avx512f", "off"), (None, "off")])
def test_auto_precision_on_cpus_with_and_without_native_bf16(monkeypatch, flags, amp):
    fake_cpu_flags(monkeypatch, flags)
    assert resolve_amp("auto", "cpu") == amp
    assert resolve_amp("auto", torch.device("mps")) == "off"          # MPS: float32 by default


def test_bad_devices_and_precisions_are_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda' or 'mps'.*meta"):
        resolve_device("meta")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    for bad in ("fp8", None, "BF16"):
        with pytest.raises(ValueError, match="amp must be one of"):
            resolve_amp(bad, "cpu")
    with pytest.raises(ValueError, match="resolve 'auto' first"):
        autocast("auto", "cpu")


def test_auto_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    mps = getattr(torch.backends, "mps", None)
    if mps is None:
        pytest.skip("this torch has no MPS backend module")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(mps, "is_available", lambda: True)
    assert resolve_device("auto").type == "mps"
    monkeypatch.setattr(mps, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"


def test_hardware_names_the_cpu_and_its_threads(monkeypatch):
    fake_cpu_flags(monkeypatch, "fpu")
    assert hardware("cpu") == f"Test CPU ({torch.get_num_threads()} threads)"


def test_autocast_runs_in_the_chosen_dtype():
    x = torch.randn(4, 8)
    for amp, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("off", torch.float32)):
        with autocast(amp, "cpu"):
            assert (x @ x.T).dtype == dtype, amp


# ---------------------------------------------------------------- fit and the GradScaler
@pytest.mark.parametrize("chosen", ["fp16", "bf16", "off"])
def test_fit_builds_a_grad_scaler_exactly_when_auto_means_fp16(monkeypatch, chosen, mnist_sample):
    """As on a T4 (fp16), an A100 (bf16) or an old GPU (off), with the CPU standing in for the GPU."""
    monkeypatch.setattr(dev, "auto_amp", lambda device: chosen)
    built = []
    real = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda *a, **k: built.append(a) or real(*a, **k))
    run = start_run(CapsNet(**TINY), subset(mnist_sample, 64, 16), epochs=1, batch_size=32, device="cpu", amp="auto")
    assert run.amp == chosen and run.history.meta["amp"] == chosen
    assert (run.scaler is not None) == (chosen == "fp16") and len(built) == (chosen == "fp16")


def test_fp16_training_with_the_scaler_follows_float32(tmp_path, mnist_sample):
    """Same seed, same digits: fp16 + GradScaler gives finite losses close to float32's, falling alike."""
    data, histories = subset(mnist_sample, 300, 200), {}
    for amp in ("off", "fp16"):
        torch.manual_seed(0)
        histories[amp] = fit(CapsNet(**TINY), data, epochs=2, batch_size=30, lr=3e-3, shift=0, device="cpu",
                             amp=amp, checkpoint=str(tmp_path / f"{amp}.pt"), progress=False)
    loss16, loss32 = histories["fp16"]["loss"], histories["off"]["loss"]
    assert all(torch.isfinite(torch.tensor(loss16))) and loss16[-1] < 0.9 * loss16[0]
    assert loss16 == pytest.approx(loss32, rel=0.02)
    scaler = torch.load(tmp_path / "fp16.pt", weights_only=True)["scaler"]
    assert scaler and scaler["scale"] > 1.0                             # the scaler stepped, its scale kept
    assert torch.load(tmp_path / "off.pt", weights_only=True)["scaler"] is None


# ---------------------------------------------------------------- modes
def test_modes_and_by_mode(monkeypatch):
    assert capsedu.MODES == ("smoke", "quick", "gpu", "full")
    values = dict(smoke=1, quick=2, gpu=3, full=4)
    for mode in capsedu.MODES:
        monkeypatch.setenv("CAPSEDU_MODE", mode)
        assert capsedu.current_mode() == mode and capsedu.by_mode(**values) == values[mode]
    with pytest.raises(TypeError):
        capsedu.by_mode(smoke=1, quick=2, full=4)                      # every mode must be given
    with pytest.raises(TypeError):
        capsedu.by_mode(1, 2, 3, 4)                                     # by name only
    monkeypatch.setenv("CAPSEDU_MODE", "fast")
    with pytest.raises(ValueError, match="smoke"):
        capsedu.current_mode()


# ---------------------------------------------------------------- the estimates printed before long cells
def test_fit_estimate_is_a_timed_step_times_the_run(monkeypatch, mnist_sample):
    from capsedu.speed import bench
    monkeypatch.setattr(bench, "median_seconds", lambda fn, repeats=3, warmup=1, device="cpu": fn() or 0.5)
    data = subset(mnist_sample, 250, 90)
    model = CapsNet(**TINY)
    before = [p.clone() for p in model.parameters()]
    seconds = bench.estimate_fit_seconds(model, data, epochs=3, batch_size=100, device="cpu", amp="off")
    assert seconds == pytest.approx(3 * (3 * 0.5 + 90 * 0.5 / 100 / 3))   # 3 steps per epoch, a third per test image
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # timed on a copy
    assert [bench.about(s) for s in (7, 44, 600, 9000)] == ["about 7 s", "about 40 s", "about 10 min", "about 2.5 h"]
