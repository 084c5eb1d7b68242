__all__ = []

# %% ../../nbs/07_old_names.ipynb #40d5b91d
# The planted-truth simulator: videos, realism, worlds, the simulated agent, judge, evolver, server, vision.
from .. import old_package_names
__getattr__ = old_package_names('sim')

# %% ../../nbs/07_old_names.ipynb #40d5b91d
# The planted-truth simulator: videos, realism, worlds, the simulated agent, judge, evolver, server, vision.
from .. import old_package_names
__getattr__ = old_package_names('sim')

# %% ../../nbs/07_old_names.ipynb #40d5b91d
# The planted-truth simulator: videos, realism, worlds, the simulated agent, judge, evolver, server, vision.
from .. import old_package_names
__getattr__ = old_package_names('sim')

# %% ../../nbs/07_old_names.ipynb #40d5b91d
# The planted-truth simulator: videos, realism, worlds, the simulated agent, judge, evolver, server, vision.
from .. import old_package_names
__getattr__ = old_package_names('sim')