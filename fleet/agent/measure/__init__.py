"""Measurement and profiling on the device: the power sampler (never faster than the sensor
converts), one operating point measured (`measurers`), the profile sweep and its staircase plan
(`profiler`, `staircase`), the profile CSV rows and the header lines that say how they were measured
(`profile_io`, `profile_writer`), and drift: noticing that the board no longer matches its profile
and carrying measured deviations across the table (`drift`, `deviation`). Python 3.6, numpy only.
"""
