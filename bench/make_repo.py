"""The repository the build benchmarks clone: 10,500 files, 40 C sources and a Makefile, and
10,458 small Go files in vendored packages with .gitmodules, committed once.

    python3 bench/make_repo.py DIR      (DIR must not exist)
"""
import os
import subprocess
import sys

repo = sys.argv[1]
os.makedirs(os.path.join(repo, "src"))
for i in range(40):
    with open(os.path.join(repo, "src", f"m{i}.c"), "w") as f:
        f.write("".join(f"int f{i}_{j}(int x) {{ return x * {j} + {i}; }}\n" for j in range(300)))
with open(os.path.join(repo, "src", "main.c"), "w") as f:
    f.write('#include <stdio.h>\nint main(void) { puts("built"); return 0; }\n')
objs = " ".join(f"src/m{i}.o" for i in range(40))
with open(os.path.join(repo, "Makefile"), "w") as f:
    f.write(f"app: src/main.o {objs}\n\tcc -o $@ $^\n%.o: %.c\n\tcc -O1 -c -o $@ $<\n")
for i in range(10_458):
    d = os.path.join(repo, "vendor", f"mod{i // 100:03}", "pkg")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.go"), "w") as f:
        f.write(f"package pkg\n\n// file {i}\nfunc F{i}() int {{ return {i} }}\n" * 4)
for m in range(0, 105, 10):
    with open(os.path.join(repo, "vendor", f"mod{m:03}", ".gitmodules"), "w") as f:
        f.write('[submodule "site"]\n\tpath = site\n\turl = https://example.invalid/site.git\n')
env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
# No background gc (the repository is copied as soon as this returns); packed in the
# foreground instead, as a repository one clones is. Left loose, its 10,500 objects would make
# the first commit in every clone start a gc of its own, which a timed `git gc` then meets.
git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "gc.auto=0"]
for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"], ["gc", "-q"]):
    subprocess.run(git + args, cwd=repo, env=env, check=True)
