"""zipcoll-bench reduce-scatter: OSU's osu_reduce_scatter table (see `sharded_bench`)."""
from zipcoll.bench.sharded_bench import main_reduce_scatter as main

__all__ = ["main"]
