__all__ = []

# %% ../../nbs/07_old_names.ipynb #3fc56c00
# The model side: endpoint settings (`config`), the OpenAI-compatible client (`client`), backends (`backends`).
from .. import old_package_names
__getattr__ = old_package_names('llm')

# %% ../../nbs/07_old_names.ipynb #3fc56c00
# The model side: endpoint settings (`config`), the OpenAI-compatible client (`client`), backends (`backends`).
from .. import old_package_names
__getattr__ = old_package_names('llm')

# %% ../../nbs/07_old_names.ipynb #3fc56c00
# The model side: endpoint settings (`config`), the OpenAI-compatible client (`client`), backends (`backends`).
from .. import old_package_names
__getattr__ = old_package_names('llm')

# %% ../../nbs/07_old_names.ipynb #3fc56c00
# The model side: endpoint settings (`config`), the OpenAI-compatible client (`client`), backends (`backends`).
from .. import old_package_names
__getattr__ = old_package_names('llm')