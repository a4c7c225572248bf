"""The central service: cluster registry, global view, planner, journaled migration, failover drills."""
