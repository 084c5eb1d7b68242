__all__ = []

# %% ../../nbs/07_old_names.ipynb #133b3862
# Benchmarks: throughput, the GEPA engine, the loop and scale benchmarks, the noise measurement.
from .. import old_package_names
__getattr__ = old_package_names('bench')

# %% ../../nbs/07_old_names.ipynb #133b3862
# Benchmarks: throughput, the GEPA engine, the loop and scale benchmarks, the noise measurement.
from .. import old_package_names
__getattr__ = old_package_names('bench')

# %% ../../nbs/07_old_names.ipynb #133b3862
# Benchmarks: throughput, the GEPA engine, the loop and scale benchmarks, the noise measurement.
from .. import old_package_names
__getattr__ = old_package_names('bench')

# %% ../../nbs/07_old_names.ipynb #133b3862
# Benchmarks: throughput, the GEPA engine, the loop and scale benchmarks, the noise measurement.
from .. import old_package_names
__getattr__ = old_package_names('bench')