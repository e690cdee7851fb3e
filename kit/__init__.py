"""Staff tools: skeleton, test values, release, Gradescope zip, benchmarks."""
