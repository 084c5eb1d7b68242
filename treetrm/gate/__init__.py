__all__ = []

# %% ../../nbs/07_old_names.ipynb #c829209d
# The gate: the e-value decision and its exits (`decision`), anchor rules, simulations, ladders.
from .. import old_package_names
__getattr__ = old_package_names('gate')

# %% ../../nbs/07_old_names.ipynb #c829209d
# The gate: the e-value decision and its exits (`decision`), anchor rules, simulations, ladders.
from .. import old_package_names
__getattr__ = old_package_names('gate')

# %% ../../nbs/07_old_names.ipynb #c829209d
# The gate: the e-value decision and its exits (`decision`), anchor rules, simulations, ladders.
from .. import old_package_names
__getattr__ = old_package_names('gate')

# %% ../../nbs/07_old_names.ipynb #c829209d
# The gate: the e-value decision and its exits (`decision`), anchor rules, simulations, ladders.
from .. import old_package_names
__getattr__ = old_package_names('gate')