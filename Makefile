# Entry points (see README.md). Each target sets up .venv first (idempotent, fast when done).
SNAKEMAKE := .venv/bin/snakemake
MIRROR ?= $(abspath ../shared/data)

.PHONY: setup reproduce test small regress-small regress-ci paper-dry lint

setup:
	bash scripts/setup.sh

reproduce: setup            ## the whole reproduction on the embedded default (smoke)
	$(SNAKEMAKE) --cores all reproduce_all

test: setup                 ## the test suite
	.venv/bin/python -m pytest -q --durations=8

small: setup                ## the small profile on real data (mirror: MIRROR=../shared/data)
	HARNESS_DATA_MIRROR=$(MIRROR) $(SNAKEMAKE) --cores all reproduce_all --configfile configs/profiles/small.yaml

regress-small: setup        ## CI regression: small profile, real data, compared with configs/expected/small.yaml
	HARNESS_DATA_MIRROR=$(MIRROR) $(SNAKEMAKE) --cores all regression claims --configfile configs/profiles/small.yaml

regress-ci: setup           ## CI regression: the ci overlay of small (every method, cut to minutes), vs configs/expected/ci.yaml
	HARNESS_DATA_MIRROR=$(MIRROR) $(SNAKEMAKE) --cores all regression --configfile configs/profiles/small.yaml configs/profiles/ci.yaml

paper-dry: setup            ## what the paper profile would run
	$(SNAKEMAKE) -n reproduce_all --configfile configs/profiles/paper.yaml

lint: setup
	$(SNAKEMAKE) --lint
