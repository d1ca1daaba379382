# The two commands of the README:
#   make run    starts the stores natively (scripts/services.sh) and runs projector
#   make test   starts the stores natively and runs every test against them
# With Docker, `make up` runs everything from docker-compose.yml instead.

GO          ?= go
GOTEST_FLAGS ?= -count=1 -timeout 45m
# Integration tests share one Neo4j database and one broker; packages run one
# at a time so their clean-ups cannot race.
GOTEST_P    ?= 1

.PHONY: all build test engine-test tools unit services services-down run up down demo lint fuzz bench explore

all: build

build:
	$(GO) build -o bin/projector ./cmd/projector

# The README's test command. It installs and starts what is missing, then
# runs qdrant-engine's own tests and every package against the services.
test: services tools engine-test
	eval "$$(scripts/services.sh env)" && $(GO) test -p $(GOTEST_P) $(GOTEST_FLAGS) ./...

# qdrant-engine's own tests, on the dependencies scripts/services.sh built
# (release profile: a debug build would compile the engine again).
engine-test:
	eval "$$(scripts/services.sh env)" && cd qdrant-engine && \
		CARGO_TARGET_DIR="$$PROJECTOR_TEST_QDRANT_ENGINE_TARGET" cargo test --release --locked --quiet

# Tools some tests need beyond Go: promtool and amtool for the deploy checks.
# A missing tool is reported by the tests that need it, so this never stops
# the run.
tools:
	@scripts/install-prometheus-tools.sh || true

# The interleaving explorer over every case (internal/explore): the late
# writer, the owner and a repair held at every pair of their fault points,
# on the real services. One case: EXPLORE_CASE='<name>' make explore.
explore: services
	eval "$$(scripts/services.sh env)" && EXPLORE=$${EXPLORE:-all} $(GO) test -count=1 -timeout 180m -parallel $${EXPLORE_PARALLEL:-4} -run '^TestExplore$$' ./internal/explore

# Unit tests only: integration tests skip (outside CI) when services are absent.
unit:
	$(GO) test -short ./...

services:
	scripts/services.sh up

services-down:
	scripts/services.sh down

# Runs projector against the native services, for machines without Docker.
run: services build
	eval "$$(scripts/services.sh env)" && bin/projector run --log-format console

up:
	docker compose up --build -d

down:
	docker compose down

# Everything of `make up`, in the foreground, plus deploy/demo.sh publishing
# sample documents in a loop so the Grafana dashboard has data.
demo:
	docker compose --profile demo up --build

lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# Longer fuzzing than the seed corpora CI runs (internal/*/testdata/fuzz and
# the f.Add seeds run with every `go test`): FUZZTIME=10m make fuzz. A crasher
# lands in the package's testdata/fuzz; commit it with the fix.
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run=^$$ -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./internal/event/
	$(GO) test -run=^$$ -fuzz=FuzzSplit -fuzztime=$(FUZZTIME) ./internal/event/
	$(GO) test -run=^$$ -fuzz=FuzzChunkID -fuzztime=$(FUZZTIME) ./internal/keys/
	$(GO) test -run=^$$ -fuzz=FuzzHandle -fuzztime=$(FUZZTIME) ./internal/project/

# The Go benchmarks (hot paths, and the stores' batching against the native
# services), then `projector bench`: throughput end to end against the
# native services, next to the stores' ceiling and a naive projector. See
# docs/benchmarks.md.
bench: services build
	eval "$$(scripts/services.sh env)" && $(GO) test -run=^$$ -bench=. -benchmem ./internal/... && bin/projector bench
