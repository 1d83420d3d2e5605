"""The suite's own plumbing: `gpu` tests skip cleanly, with a reason, when CUDA is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.core.digests import cache_root

pytest_plugins = ["pytester"]

# pytester gives the run a fresh HOME, under which the conftest's session start would assemble and convert the
# shipped models again (85 s); read here, at collection, this is the suite's own cache, where they already are.
SUITE_CACHE = cache_root()


def test_gpu_marked_tests_skip_without_cuda(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv("SPANJUDGE_CACHE", str(SUITE_CACHE))

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
