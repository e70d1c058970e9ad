"""zipcoll-bench allgather: OSU's osu_allgather table (see `sharded_bench`)."""
from zipcoll.bench.sharded_bench import main_allgather as main

__all__ = ["main"]
