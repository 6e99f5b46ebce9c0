from dsdoctor.cli import main

main()
