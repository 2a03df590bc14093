"""Command lines, cluster launchers and benchmarks: the partlog CLI, partlog cluster, benches."""
