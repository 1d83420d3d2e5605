"""The suite's own plumbing: `gpu` tests skip cleanly, with a reason, when CUDA is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def test_gpu_marked_tests_skip_without_cuda(pytester: pytest.Pytester) -> None:
    import torch

    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_needs_cuda():
            import torch
            assert torch.cuda.is_available()
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-o", "markers=gpu\nslow")
    if torch.cuda.is_available():
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*needs a CUDA GPU*"])
