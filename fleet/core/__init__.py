"""The method's core: profiles, efficiency, Algorithm 1 / eq. 4, objectives, baselines,
comparison."""
