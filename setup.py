"""One distribution, two import packages: the Spark connector and the protocol server."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="pyspark-durable-streams",
    version="0.1.0",
    description="Spark source and sink for the Durable Streams protocol, and a protocol server on Delta Lake",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["pyspark_durable_streams", "pyspark_durable_streams.*"])
    + find_packages("server", include=["durable_streams_server", "durable_streams_server.*"]),
    package_dir={"durable_streams_server": "server/durable_streams_server"},
    package_data={
        "durable_streams_server": ["py.typed", "http/ui/static/*", "http/ui/grafana/*.json"],
        "pyspark_durable_streams": ["py.typed"],
    },
    install_requires=[
        "requests>=2.31",
        "sseclient-py>=1.8",
        "tqdm>=4.60",
    ],
    extras_require={
        "spark": [
            "pyspark>=4.0",
            "pyarrow>=16",
            "pandas>=2,<3",
            "numpy>=1.24",
        ],
        "delta": [
            "delta-spark>=4.0",
        ],
        "server": [
            "deltalake>=1.2,<2",
            "pyarrow>=16",
            "starlette>=0.40",
            "uvicorn>=0.53,<0.55",  # the fast path uses its internals: tests/server/test_uvicorn_internals.py
            "prometheus_client>=0.20",
            "cryptography>=42",  # Ed25519 webhook signatures
            "httpx>=0.27",  # webhook deliveries
            "sniffio>=1.3",  # httpcore asks for it at every lock it makes: absent, a failed import each time
            "numpy>=1.24",
            "orjson>=3.9",  # JSON validation of bulk appends
            "httptools>=0.6.4,<0.10",  # the HTTP/1.1 parser (C, llhttp), asked through uvicorn's protocol
            "uvloop>=0.19",  # the event loop (libuv)
        ],
        "test": [
            "deltalake>=1.2,<2",
            "pyarrow>=16",
            "starlette>=0.40",
            "uvicorn>=0.53,<0.55",  # the fast path uses its internals: tests/server/test_uvicorn_internals.py
            "prometheus_client>=0.20",
            "hypothesis>=6.100",
            "pytest>=8",
            "pytest-xdist>=3.5",  # make test: two workers
            "moto[server]>=5.0",
            "boto3>=1.34",
            "cryptography>=42",  # TLS test certificates; webhook signatures
            "httpx>=0.27",
            "sniffio>=1.3",
            "numpy>=1.24",
            "orjson>=3.9",
            "httptools>=0.6.4,<0.10",
            "uvloop>=0.19",
            "ruff>=0.6",
            "mypy>=1.10",
            "pyyaml>=6",  # the README's alert rule is parsed by its test
            "mkdocs>=1.6,<2",  # the documentation site (docs/, mkdocs.yml), built --strict by make test
            "mkdocs-material>=9.5,<10",
            "websockets>=13",  # the status page's browser tests drive Chromium over the DevTools Protocol
            "pyspark>=4.0",
            "pandas>=2,<3",
        ],
    },
    entry_points={
        "console_scripts": [
            "durable-streams-server=durable_streams_server.cli:main",
            "durable-streams=pyspark_durable_streams.client.cli:main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Database",
    ],
)
