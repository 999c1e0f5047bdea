"""Teacher-forced scoring: token log-probs of responses under the policy or another model."""
