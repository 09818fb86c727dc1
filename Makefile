# make lab    - create .venv with the pinned CPU stack and open JupyterLab (localhost, with a token)
# make test   - the whole suite: pytest over tests/ (which runs every exercise) and nbval over the
#               lessons and solutions (what CI runs)
# make test-here / bench-here - the same in the current interpreter, installing nothing (a GPU box
#               whose stack is already there: see README, "Running on a GPU machine")
# make exercises - regenerate exercises/ from solutions/ (nbgrader's preprocessors)
# make mutants - feed every check the wrong answers kernels/tools/mutants.py makes; report in reports/
# make site   - the course as a static website in _build/html (mystmd reads the committed notebooks, offline)
# make doctor / doctor-here - the seat check (kernels/tools/doctor.py) in .venv / in the current
#               interpreter; run as a file so that it reports even where `import kernels` fails
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
# exercises/ run in tests/test_notebooks.py, which asserts what they print
NOTEBOOKS = notebooks solutions
# pytest-xdist workers: one per core, as many as memory holds at 2 GiB each (kernels/tools/doctor.py, _jobs); work
# units (a notebook's cells, a test file, or a test of a file tests/conftest.py spreads) longest first, by
# tests/durations.json (tests/conftest.py schedules them); `make test-here DURATIONS=1` on a GPU writes it anew
JOBS   ?= $(shell $(PYTHON) kernels/tools/doctor.py --jobs)
# a Jupyter kernel took over 60 s (nbval's and nbclient's default) to start at the start of a 16-worker run (H100)
PYTEST_ARGS = tests $(NOTEBOOKS) --nbval-lax --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg -q \
	--nbval-kernel-startup-timeout 300 \
	-n $(JOBS) $(if $(DURATIONS),--record-durations tests/durations.json)
# the suite in two parts: all but the tests marked `timing` in JOBS workers, then those alone, so that no other
# kernel shares the GPU while they time (both parts run; either failing fails the suite). The parallel part times
# with a tenth of the windows (COURSE_BENCH_SCALE, kernels/lab/bench.py): its figures, with the card shared, measure
# nothing; what it tests is that the live paths run
define suite
COURSE_BENCH_SCALE=0.1 $(1) -m pytest $(PYTEST_ARGS) -m "not timing"; parallel=$$?; \
$(1) -m pytest tests -q -p no:xdist -m timing; alone=$$?; \
test $$parallel = 0 -a $$alone = 0
endef

.PHONY: lab test test-here bench-here exercises mutants site doctor doctor-here clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	# a learner's lab without nbgrader's buttons, as a room's participants have it: its Validate passed an untouched
	# exercise (the checks print their verdicts, they raise nothing); the instructor grades from the command line
	$(PY) -m jupyter labextension disable --level=sys_prefix @jupyter/nbgrader
	for e in formgrader validate_assignment assignment_list course_list; do \
		$(PY) -m jupyter server extension disable --sys-prefix nbgrader.server_extensions.$$e || exit 1; done
	touch $@

lab: $(VENV)/.installed
	$(PY) -m jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=$(CURDIR) \
		$(if $(filter 0,$(shell id -u)),--allow-root) README.md

test: $(VENV)/.installed
	$(call suite,$(PY))

test-here:
	$(call suite,PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON))

bench-here:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m kernels.tools.record

doctor:
	@test -x $(PY) || { echo "FAIL  no $(VENV) here: make lab creates it (or make doctor-here, with the stack installed)"; exit 1; }
	$(PY) kernels/tools/doctor.py

doctor-here:
	$(PYTHON) kernels/tools/doctor.py

exercises: $(VENV)/.installed
	$(PY) -m kernels.tools.exercises

mutants: $(VENV)/.installed
	$(PY) -m kernels.tools.mutants --report

site: $(VENV)/.installed
	$(PY) website/build.py

clean:
	rm -rf $(VENV)
