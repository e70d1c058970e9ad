"""Reduce-scatter / all-gather schedules: one module a schedule, each registering itself in
`registry.SHARDED` with both directions and their costs (the table `zipcoll.reduce_scatter`
and `zipcoll.allgather` choose from)."""
