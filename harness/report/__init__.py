"""The report a researcher opens: every table, figure and claim as one static web site
(:mod:`harness.report.site`), with the papers' figures drawn from the measured cells
(:mod:`harness.report.figures`)."""
