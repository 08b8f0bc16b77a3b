"""Prints the folder where `make install PREFIX=...` puts the Python package hvd so that
this Python (run it with the one that should import hvd) finds it:
  PREFIX = the user base ($HOME/.local)  -> the user site (on sys.path by default);
  a folder of sys.path under PREFIX      -> that one (/usr/local: Debian's
                                            /usr/local/lib/python3.X/dist-packages);
  any other PREFIX                       -> PREFIX/lib/python3.X/site-packages (put it on
                                            PYTHONPATH).
Usage: python3 scripts/python_site.py PREFIX"""
import os
import site
import sys
import sysconfig

if len(sys.argv) != 2:
    sys.exit("usage: python3 scripts/python_site.py PREFIX")
prefix = os.path.abspath(sys.argv[1])
if prefix == os.path.abspath(site.getuserbase()):
    print(site.getusersitepackages())
    sys.exit(0)
for path in sys.path:
    # PREFIX/lib/..., not a deeper prefix's (/usr/local/lib/... is not PREFIX=/usr's).
    if (path.startswith(prefix + os.sep) and os.path.relpath(path, prefix).startswith("lib")
            and os.path.basename(path) in ("dist-packages", "site-packages")):
        print(path)
        sys.exit(0)
print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
