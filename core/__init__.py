"""ddrl's distributed machinery: registries, rollout workers, learner, evaluator, metrics."""
