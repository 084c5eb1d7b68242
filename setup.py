from setuptools import setup
import setuptools, shlex
from configparser import ConfigParser

# note: all settings are in settings.ini; edit there, not here
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o:cfg[o] for o in cfg_keys}

licenses = {
    'apache2': ('Apache Software License 2.0','OSI Approved :: Apache Software License'),
    'mit': ('MIT License', 'OSI Approved :: MIT License'),
    'gpl2': ('GNU General Public License v2', 'OSI Approved :: GNU General Public License v2 (GPLv2)'),
    'gpl3': ('GNU General Public License v3', 'OSI Approved :: GNU General Public License v3 (GPLv3)'),
    'bsd3': ('BSD License', 'OSI Approved :: BSD License'),
}
statuses = [ '1 - Planning', '2 - Pre-Alpha', '3 - Alpha',
    '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive' ]
py_versions = '3.6 3.7 3.8 3.9 3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
if cfg.get('pip_requirements'): requirements += shlex.split(cfg.get('pip_requirements', ''))
min_python = cfg['min_python']
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
dev_requirements = (cfg.get('dev_requirements') or '').split()
ray_requirements = (cfg.get('ray_requirements') or '').split()  # grids and sweeps on Ray: pip install 'treetrm[ray]'
tokenizer_requirements = (cfg.get('tokenizer_requirements') or '').split()  # _TOKENIZER: 'treetrm[tokenizer]'
# the docs site (python docs/build.py) and its browser test: 'treetrm[docs]', part of the dev extra
docs_requirements = (cfg.get('docs_requirements') or '').split()

package_data = dict()
pkg_data = cfg.get('package_data', None)
if pkg_data:
    package_data[cfg['lib_name']] =  pkg_data.split() # split as multiple files might be listed
# Add package data to setup_cfg for setuptools.setup(..., **setup_cfg)
setup_cfg['package_data'] = package_data

# the assets the package ships beside its code (treetrm.core.asset_dir reads them): a wheel gets prompts/ and the
# demo world as treetrm/assets/prompts and treetrm/assets/demo; a checkout (or an editable install) reads them in place
assets = {f"{cfg['lib_name']}.assets.prompts": 'prompts', f"{cfg['lib_name']}.assets.demo": 'data/demo'}
package_data.update({f"{cfg['lib_name']}.assets.prompts": ['*/*.md'], f"{cfg['lib_name']}.assets.demo": ['*.json', '*.jsonl', 'trees/*/tree.json']})

setuptools.setup(
    name = cfg['lib_name'],
    license = lic[0],
    classifiers = [
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: '+o for o in py_versions[py_versions.index(min_python):]] + (['License :: ' + lic[1] ] if lic[1] else []),
    url = cfg['git_url'],
    packages = setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name']+'.*']) + list(assets),
    package_dir = assets,
    include_package_data = True,
    install_requires = requirements,
    extras_require={ 'dev': dev_requirements + docs_requirements, 'ray': ray_requirements,
                     'tokenizer': tokenizer_requirements, 'docs': docs_requirements },
    dependency_links = cfg.get('dep_links','').split(),
    python_requires  = '>=' + cfg['min_python'],
    long_description = open('README.md', encoding='utf-8').read(),
    long_description_content_type = 'text/markdown',
    zip_safe = False,
    entry_points = {
        'console_scripts': cfg.get('console_scripts','').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']
    },
    **setup_cfg)
