"""Fixtures shared by every test folder."""
import pytest


@pytest.fixture(scope="session")
def mnist_sample():
    """The embedded MNIST sample (9,000 train / 1,000 test digits) on the CPU, loaded once per session."""
    from capsedu.data.mnist import load_dataset
    return load_dataset("mnist", source="sample", device="cpu", verbose=False)
