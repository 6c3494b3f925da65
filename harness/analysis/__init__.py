"""Analyses of trained models' outputs (data and plots), e.g. QCR's codebook analyses (:mod:`harness.analysis.codebook`)."""
