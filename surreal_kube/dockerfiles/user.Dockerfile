# syntax=docker/dockerfile:1
# The user's image: their project on top of surreal-kube's runtime image, so that pods can import
# the user's own environments (`gym:mypkg.envs:Tiny-v0`) and anything else of theirs.
#
# `surreal-kube build` run in a project folder (a pyproject.toml whose project is not surreal-kube,
# or a requirements.txt) builds this for every runtime image the experiment runs, FROM that runtime
# image: the user never copies or edits our Dockerfiles. Context: the project folder, filtered by
# its own .dockerignore, else by user.Dockerfile.default.dockerignore (next to this file: version
# control, virtual environments, caches and build output stay out). The tag is the content hash of
# this file, the project's files, the runtime image's own content hash and the platform, so a
# change to either the project or surreal-kube is a new tag, and `create`/`render` run from the
# same folder compute the same one.
#
# In the image:
# - requirements.txt, when present, is installed into the runtime's virtual environment (pip
#   resolves against what is there: packages surreal-kube already pins are not installed twice);
# - a project with pyproject.toml or setup.py is pip-installed (its dependencies too) and its
#   source removed; one without is kept at /opt/project and put on sys.path (a .pth file).
#
# Build arguments:
#   BASE_IMAGE        the runtime image (set by `surreal-kube build`: the exact content-hash tag)
#   PROJECT_PIP_ARGS  extra `pip install` arguments (e.g. --no-index --no-build-isolation offline)
ARG BASE_IMAGE=surreal-kube/runtime-cpu:unset
FROM ${BASE_IMAGE}
ARG PROJECT_PIP_ARGS=""
USER root
COPY . /opt/project
RUN set -e; \
    pip="/opt/surreal/bin/pip install --no-cache-dir --disable-pip-version-check"; \
    cd /opt/project; \
    if [ -f requirements.txt ]; then ${pip} ${PROJECT_PIP_ARGS} -r requirements.txt; fi; \
    if [ -f pyproject.toml ] || [ -f setup.py ]; then \
      ${pip} ${PROJECT_PIP_ARGS} /opt/project; \
      cd /; rm -rf /opt/project; \
    else \
      site=$(/opt/surreal/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
      echo /opt/project > "${site}/surreal-kube-user-project.pth"; \
      chmod -R a+rX /opt/project; \
    fi
USER 10001:10001
