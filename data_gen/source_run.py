"""What a generate or an annotate run reads, and where it writes: both stages take one `SourceRun`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spanjudge.core.catalog import Catalog
from spanjudge.core.progress import Tracker
from spanjudge.core.sharding import Shard

from .config import SourcesConfig


@dataclass(frozen=True)
class SourceRun:
    """sources:      the sources config, read from `sources_path` (its relative paths are read from its folder)
    out_dir:      the run's folder (one run at a time holds it)
    data_root:    the folder `$DATA/` paths name (None: such a path is an error)
    cache_path:   the model-reply cache (default: out_dir/cache.sqlite)
    progress:     where progress is shown (core/progress.py)
    shard:        only the inputs in this shard (data_gen/shards.py)"""

    sources: SourcesConfig
    sources_path: Path
    out_dir: Path
    catalog: Catalog
    data_root: Path | None
    cache_path: Path | None = None
    progress: Tracker | None = None
    shard: Shard | None = None

    def make_cache_folder(self) -> Path:
        """The reply cache's path, its folder made."""
        path = self.cache_path or self.out_dir / "cache.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
